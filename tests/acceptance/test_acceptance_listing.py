"""Issue 4 acceptance: the core's reading of a checkpoint directory agrees with Orbax's own read-only listing,
on the persistent directories the acceptance runs wrote (emergency `<step>/default/` layout, the plain
persistent-only layout, and whatever a killed or preempted save left behind)."""

from __future__ import annotations

import os

import pytest

from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore
from mtc_provider.core.measure.listing import finalized_from_objects
from tests.acceptance.conftest import STEPS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _orbax_steps(directory: str) -> tuple[list[int], list[int]]:
    import orbax.checkpoint as ocp

    manager = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(read_only=True))
    try:
        managed = sorted(int(s) for s in manager.all_steps())
    finally:
        manager.close()
    found = sorted(int(m.step) for m in ocp.step.standard_name_format().find_all(directory))
    return managed, found


@pytest.mark.parametrize("run_fixture", ["reference_run", "faulted_run", "baseline_run"])
def test_core_listing_agrees_with_orbax_read_only_listing(run_fixture, request):
    run = request.getfixturevalue(run_fixture)
    directory = str(run.checkpoint_dir)
    managed, found = _orbax_steps(directory)
    ours = [info.step for info in LocalCheckpointStore().finalized_steps(directory)]
    entries = {name: os.listdir(os.path.join(directory, name)) for name in os.listdir(directory)
               if os.path.isdir(os.path.join(directory, name))}
    assert ours, f"no finalized steps in {directory}: {sorted(entries)}"
    assert ours == managed == found, (ours, managed, found, sorted(entries))
    names = [f"{step}/{name}" for step, children in entries.items() for name in children]
    assert finalized_from_objects(names) == ours  # the pure reading of the same entries, as GCS lists them
    assert LocalCheckpointStore().finalized(directory)[-1].step == max(managed) == STEPS
