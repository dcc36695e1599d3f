"""Issue 40 (1): a run that trains between rare persistent saves by restoring from the ramdisk is not a crash loop.

The real JAX/Orbax workload through the launch operator (synchronous tries) on the local target, at the guide's
cadence scaled down: local saves every L steps, one persistent save at step 40 (after every fault), six host losses
(`sigkill_host`) six steps apart and `maxRestarts` 2, so every third loss fails the JobSet (`ReachedMaxRestarts`).
No finalized checkpoint exists when an attempt ends; each in-cluster restart resumes from the local tier and logs
MaxText's `restoring from this run's directory step N`, which the trigger reads as restorable progress. The run must
end in one Airflow try with the fault-free reference run's parameters, bit for bit; before, it ended after two
attempts with `crash loop: no checkpoint progress`.
"""

from __future__ import annotations

import pytest

from mtc_local.cluster.lifecycle import stop
from mtc_provider.adapters.workload_events import events_dir, read_events
from mtc_provider.operators.jobset import MtcDeleteJobSetOperator, MtcJobSetOperator
from tests.acceptance.conftest import L, STEPS, WORKLOAD_FLAGS, Homes, TrainingRun
from tests.support.js_helpers import FakeTI

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PERSISTENT = 40  # rare: no persistent checkpoint before the last fault
KILLS = [{"kind": "sigkill_host", "at_step": 6 * (i + 1), "slice": i % 2, "host": 0} for i in range(6)]


def test_six_host_losses_between_persistent_saves_end_in_one_try_with_the_reference_parameters(
        homes: Homes, reference_run: TrainingRun):
    home = homes.new("restores")
    bucket = home.root.parent / "bucket"
    run_name = "acc-restores"
    op = MtcJobSetOperator(
        task_id="train", target={"kind": "local", "home": str(home.root)},
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": run_name, "base_output_directory": str(bucket), "steps": STEPS,
                       "enable_emergency_checkpoint": True, "local_checkpoint_directory": "/local",
                       "local_checkpoint_period": L, "checkpoint_period": PERSISTENT, "enable_autocheckpoint": True},
        workload={"jobset_name": run_name, "image": "local", "command": ["python3", "-m", "mtc_local.workload"],
                  "extra_flags": WORKLOAD_FLAGS, "max_restarts": 2, "termination_grace_period_seconds": 15},
        deferrable=False, poll_interval=0.2, retries=2, crash_loop_attempts=2, fault_plan=KILLS)
    ti = FakeTI(run_id="restores", max_tries=2)
    try:
        result = op.execute({"ti": ti})  # one try: a crash-loop verdict would raise here
    finally:  # the sample DAG's teardown, then the local cluster
        MtcDeleteJobSetOperator(task_id="teardown", run_name=run_name, launch_task_id="train",
                                target={"kind": "local", "home": str(home.root)}).execute({"ti": ti})
        stop(home.root)
    events = read_events(events_dir(str(bucket), run_name))
    finish = next(e for e in reversed(events) if e["event"] == "finish")
    assert result["last_step"] == STEPS and finish["params_sha256"] == reference_run.sha256
    attempts = ti.xcoms["attempts"]
    assert len(attempts) >= 2 and {a["try"] for a in attempts} == {1}, attempts
    local = [e["step"] for e in events if e["event"] == "restore" and e.get("tier") == "local" and e["process"] == 0]
    assert local, [e for e in events if e["event"] == "restore"]  # the restarts resumed from the ramdisk
    ended = [a for a in attempts if a.get("end") is not None and a is not attempts[-1]]
    # each interrupted attempt's recorded progress is a step a start restored: no finalized one existed yet
    assert all(a["last_step"] is not None and a["last_step"] < PERSISTENT for a in ended), ended
