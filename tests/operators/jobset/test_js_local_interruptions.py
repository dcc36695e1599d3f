"""Thirty interruptions, each after progress, on the local target (the local runner's JobSet, pods as processes, the
local API server), through the launch operator (synchronous tries): preemptions (`sigterm_slice`: the workload saves
with autocheckpoint and exits 0, the JobSet completes below its target) and host losses (`sigkill_host`: exit 137,
an in-cluster restart). Every preemption is followed in the same try (no Airflow retry spent: the task has 2), and
the run ends with the final parameters of a fault-free run of the same seed. The runner fires each fault once per
run (it keys them on the run-name label: docs/local-target.md).

The workload is `mtc_local.light_workload` (no JAX: Orbax's on-disk layout, the same flags, events and exit codes;
its final "parameters" are a hash of the seed and the final step). With the JAX workload each start of the pods
took 20-35 s on the shared 2-core machine (measured 2026-12-02: one preempted attempt 35 s from submit to end, a
235-step fault-free run 56 s), so 30 interruptions would take over ten minutes; the JAX path of a preemption and of
a host loss, ending bit for bit with the fault-free parameters, is tests/acceptance/test_acceptance_faults.py's.
"""

from __future__ import annotations

import time

import pytest

from mtc_local.cluster.client import LocalCluster
from mtc_provider.adapters.workload_events import events_dir, read_events
from mtc_provider.core.attempt import interruptions
from mtc_provider.core.attempt.attempt_records import read_attempts
from mtc_provider.operators.jobset import MtcJobSetOperator
from tests.support.js_helpers import FakeTI

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PREEMPTIONS = 15
# Steps between two preemptions: more than the SIGTERM notifier's delay, and more than checkpoint_period, so that
# every attempt passes a persistent checkpoint before its preemption (its progress, what the operator reads).
SPACING = 10
PERSISTENT = 5
STEPS = SPACING * PREEMPTIONS + 10
# Slow enough steps that each fault fires on its own (SPACING steps apart > a restart of the pods), fast enough
# to stay within about three minutes.
FLAGS = {"seed": 7, "step_time_ms": 150}
# A preemption stops every slice: MaxText's processes agree on a preemption step (JAX's preemption sync) and all
# exit 0; the light workload's processes join through their shared folder, so one slice's SIGTERM would stop both.
FAULTS = [fault for i in range(PREEMPTIONS) for fault in (
    {"kind": "sigterm_slice", "at_step": SPACING * i + 3, "slice": 0},
    {"kind": "sigterm_slice", "at_step": SPACING * i + 3, "slice": 1},
    {"kind": "sigkill_host", "at_step": SPACING * i + 8, "slice": i % 2, "host": 0})]


def _operator(tmp_path, run_name: str, fault_plan=None) -> MtcJobSetOperator:
    return MtcJobSetOperator(
        task_id="train", target={"kind": "local", "home": str(tmp_path / "home")},
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": run_name, "base_output_directory": str(tmp_path / "bucket"), "steps": STEPS,
                       "enable_emergency_checkpoint": True, "local_checkpoint_directory": "/local",
                       "local_checkpoint_period": 2, "checkpoint_period": PERSISTENT, "enable_autocheckpoint": True},
        workload={"jobset_name": run_name, "image": "local", "command": ["python3", "-m", "mtc_local.light_workload"],
                  "extra_flags": FLAGS, "max_restarts": 3, "termination_grace_period_seconds": 15},
        deferrable=False, poll_interval=0.2, retries=2, crash_loop_attempts=2, fault_plan=fault_plan)


def _finish(tmp_path, run_name: str) -> dict:
    events = read_events(events_dir(str(tmp_path / "bucket"), run_name))
    return next(e for e in reversed(events) if e["event"] == "finish")



def test_thirty_interruptions_after_progress_end_in_one_try_with_the_fault_free_parameters(tmp_path, home):
    started = time.monotonic()
    reference = _operator(tmp_path, "ref").execute({"ti": FakeTI(run_id="ref")})
    assert reference["last_step"] == STEPS
    reference_wall = time.monotonic() - started

    started = time.monotonic()
    ti = FakeTI(run_id="int", max_tries=2)
    result = _operator(tmp_path, "int", FAULTS).execute({"ti": ti})  # one try: it must not raise
    wall = time.monotonic() - started
    attempts = ti.xcoms["attempts"]
    counts = interruptions.count(read_attempts(attempts))
    fired = LocalCluster(str(home)).run_faults("default", "int")
    summary = (f"{wall:.0f}s (fault-free: {reference_wall:.0f}s), {counts}, {len(fired)} faults fired, attempts "
               f"{[(a['attempt'], a['outcome'], a['restarts']) for a in attempts]}")
    assert result["last_step"] == STEPS, summary
    assert len(fired) == len(FAULTS), summary  # every preemption and host loss happened, each once
    # Each interruption was survived: an attempt that completed below its target (graceful) followed in the same
    # try, or an in-cluster restart (a host loss; a pod SIGTERMed before its handler was set exits 143 and, marked
    # DisruptionTarget, is restarted by the RestartOnDisruption rule without counting against maxRestarts).
    assert counts["graceful"] + counts["restarts"] >= 2 * PREEMPTIONS, summary
    assert counts["graceful"] >= 1 and counts["in_try"] == counts["graceful"] + counts["failed"], summary
    assert {a["try"] for a in attempts} == {1}, summary  # no Airflow retry spent
    assert _finish(tmp_path, "int")["params_sha256"] == _finish(tmp_path, "ref")["params_sha256"], summary
    print(f"interruptions survived in one try: {summary}")
