"""Thirty interruptions, each after progress, on the local target with real JAX/Orbax processes, through the launch
operator (synchronous tries): preemptions (`sigterm_slice`: the workload saves with autocheckpoint and exits 0,
the JobSet completes below its target) and host losses (`sigkill_host`: exit 137, an in-cluster restart that
restores the local tier). Every preemption is followed in the same try (no Airflow retry spent: the task has 2),
and the run ends with the parameters of a fault-free run of the same seed, bit for bit.

A preemption is noticed by JAX's SIGTERM notifier about a second later (tests/acceptance/conftest.py, SIGTERM_AT):
the faults are spaced by more steps than that, so each attempt trains before its preemption, and fires each once per
run (the runner keys them on the run-name label: docs/local-target.md).
"""

from __future__ import annotations

import time

import pytest

from mtc_local.cluster.lifecycle import stop
from mtc_provider.adapters.workload_events import events_dir, read_events
from mtc_provider.core import interruptions
from mtc_provider.operators.jobset import MtcJobSetOperator
from tests.support.js_helpers import FakeTI

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PREEMPTIONS = 15
# Steps between two preemptions: more than the SIGTERM notifier's delay, and more than checkpoint_period, so that
# every attempt passes a persistent checkpoint before its preemption (its progress, what the operator reads).
SPACING = 15
PERSISTENT = 10
STEPS = SPACING * PREEMPTIONS + 10
FLAGS = {"seed": 7, "model_dim": 64, "global_batch_size": 8, "step_time_ms": 20}
FAULTS = [fault for i in range(PREEMPTIONS) for fault in (
    {"kind": "sigterm_slice", "at_step": SPACING * i + 5, "slice": i % 2},
    {"kind": "sigkill_host", "at_step": SPACING * i + 12, "slice": (i + 1) % 2, "host": 0})]


def _operator(tmp_path, run_name: str, fault_plan=None) -> MtcJobSetOperator:
    return MtcJobSetOperator(
        task_id="train", target={"kind": "local", "home": str(tmp_path / "home")},
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": run_name, "base_output_directory": str(tmp_path / "bucket"), "steps": STEPS,
                       "enable_emergency_checkpoint": True, "local_checkpoint_directory": "/local",
                       "local_checkpoint_period": 5, "checkpoint_period": PERSISTENT, "enable_autocheckpoint": True},
        workload={"jobset_name": run_name, "image": "local", "command": ["python3", "-m", "mtc_local.workload"],
                  "extra_flags": FLAGS, "max_restarts": 3, "termination_grace_period_seconds": 15},
        deferrable=False, poll_interval=0.2, retries=2, crash_loop_attempts=2, fault_plan=fault_plan)


def _finish(tmp_path, run_name: str) -> dict:
    events = read_events(events_dir(str(tmp_path / "bucket"), run_name))
    return next(e for e in reversed(events) if e["event"] == "finish")


@pytest.fixture
def home(tmp_path):
    yield tmp_path / "home"
    stop(tmp_path / "home")


def test_thirty_interruptions_after_progress_end_in_one_try_with_the_fault_free_parameters(tmp_path, home):
    reference = _operator(tmp_path, "ref").execute({"ti": FakeTI(run_id="ref")})
    assert reference["last_step"] == STEPS

    started = time.monotonic()
    ti = FakeTI(run_id="int", max_tries=2)
    result = _operator(tmp_path, "int", FAULTS).execute({"ti": ti})  # one try: it must not raise
    wall = time.monotonic() - started
    attempts = ti.xcoms["attempts"]
    counts = interruptions.count(attempts)
    summary = f"{wall:.0f}s, {counts}, attempts {[(a['attempt'], a['outcome'], a['restarts']) for a in attempts]}"
    assert result["last_step"] == STEPS, summary
    assert counts["graceful"] == PREEMPTIONS and counts["in_try"] == PREEMPTIONS, summary
    assert counts["restarts"] >= PREEMPTIONS, summary  # every host loss restarted in the cluster
    assert counts["graceful"] + counts["restarts"] >= 30, summary
    assert {a["try"] for a in attempts} == {1}, summary
    assert _finish(tmp_path, "int")["params_sha256"] == _finish(tmp_path, "ref")["params_sha256"], summary
    print(f"30 interruptions survived in one try: {summary}")
