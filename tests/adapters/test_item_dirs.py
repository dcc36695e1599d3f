"""The item folder inside a finalized step: `items`, `default` or `state` depending on who wrote it.

Names from MaxText 0.2.5 (`maxtext/common/checkpointing.py`: checkpointables {"items": state};
`emergency_checkpointing.py`: Composite(state=...)) and Orbax's emergency CheckpointManager, whose persistent
tier restores from `<step>/default` (orbax/checkpoint/experimental/emergency/checkpoint_manager.py).
"""

from __future__ import annotations

import pytest
from tests.support.checkpoint_fixtures import GCS_CONN_ID, run_orbax

from mtc_provider.adapters.checkpoint_stores import GcsCheckpointStore, LocalCheckpointStore
from mtc_provider.core.measure.listing import finalized_from_objects, item_of

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("children, item", [
    (["_CHECKPOINT_METADATA", "commit_success.txt", "items", "iter"], "items"),  # MaxText, grain input
    (["_CHECKPOINT_METADATA", "commit_success.txt", "default/"], "default"),  # emergency manager, persistent tier
    (["state", "_CHECKPOINT_METADATA"], "state"),  # a local-tier step
    (["_CHECKPOINT_METADATA", "commit_success.txt"], None),
])
def test_item_of(children, item):
    assert item_of(children) == item


def test_a_real_maxtext_step_is_finalized_by_its_commit_marker():
    entries = {"10": ["_CHECKPOINT_METADATA", "commit_success.txt", "items"],
               "20": ["_CHECKPOINT_METADATA", "items"],  # GCS, save in flight: metadata but no marker yet
               "30.orbax-checkpoint-tmp-1764488400": ["_CHECKPOINT_METADATA", "commit_success.txt", "items"]}
    names = [f"ckpt/{step}/{name}" for step, children in entries.items() for name in children]  # a GCS listing
    assert finalized_from_objects(names, "ckpt/") == [10]


def test_local_store_finds_the_item_orbax_wrote(tmp_path):
    directory = str(tmp_path / "run" / "checkpoints")
    assert run_orbax(directory, "3").returncode == 0
    store = LocalCheckpointStore()
    [info] = store.finalized(directory)
    assert store.item_path(info.path) == f"{directory}/3/default"
    assert store.item_path(f"{directory}/99") is None


def test_gcs_store_finds_the_item_orbax_wrote(gcs):
    directory = "gs://ckpt/items-run/checkpoints"
    assert run_orbax(directory, "4").returncode == 0
    store = GcsCheckpointStore(GCS_CONN_ID)
    [info] = store.finalized(directory)
    assert store.item_path(info.path) == f"{directory}/4/default"
    assert store.item_path(f"{directory}/99") is None
