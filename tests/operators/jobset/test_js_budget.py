"""A workload that crashes right after every save ends within its budget, with the numbers, in its first try.

The local target (the local runner's JobSet, pods as processes, the local API server) through the launch operator
(synchronous tries), with the light workload, which saves only where a TPU slice could: a local save every 2 steps,
persistent saves rare (every 40), and a host lost one step after each local save (`sigkill_host` at every odd
step). Each in-cluster restart restores the newest local save (the workload logs MaxText's restore line, which the
trigger reads as restorable progress), so every attempt makes progress and, without a budget, the run went on
through attempt after attempt with no Airflow retry spent. With the default budget (6 interruptions, at least one
save period each), it ends once six interruptions gained no more than one save each.
"""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

from mtc_provider.operators.jobset import MtcDeleteJobSetOperator, MtcJobSetOperator
from tests.support.js_helpers import FakeTI

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

LOCAL = 2  # local_checkpoint_period: the run's shortest save period, so the derived min_steps_per_interruption
CRASHES = [{"kind": "sigkill_host", "at_step": LOCAL * i + 1, "slice": i % 2, "host": 0} for i in range(1, 16)]



def test_a_crash_after_every_save_ends_over_budget_in_the_first_try(tmp_path, home):
    run_name = "crashy"
    target = {"kind": "local", "home": str(home)}
    op = MtcJobSetOperator(
        task_id="train", target=target, slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": run_name, "base_output_directory": str(tmp_path / "bucket"), "steps": 200,
                       "enable_emergency_checkpoint": True, "local_checkpoint_directory": "/local",
                       "local_checkpoint_period": LOCAL, "checkpoint_period": 40},
        workload={"jobset_name": run_name, "image": "local", "command": ["python3", "-m", "mtc_local.light_workload"],
                  "extra_flags": {"seed": 3, "step_time_ms": 150}, "max_restarts": 3,
                  "termination_grace_period_seconds": 15},
        deferrable=False, poll_interval=0.2, retries=2, fault_plan=CRASHES)
    ti = FakeTI(run_id="crashy", max_tries=2)
    try:
        with pytest.raises(AirflowFailException) as failed:
            op.execute({"ti": ti})
    finally:
        MtcDeleteJobSetOperator(task_id="teardown", run_name=run_name, launch_task_id="train",
                                target=target).execute({"ti": ti})
    attempts = ti.xcoms["attempts"]
    summary = f"{failed.value}; attempts {[(a['attempt'], a['outcome'], a['restarts'], a['last_step']) for a in attempts]}"
    assert "over budget: the last" in str(failed.value) and "min_steps_per_interruption" in str(failed.value), summary
    assert {a["try"] for a in attempts} == {1}, summary  # no Airflow retry spent on the way
    interrupted = sum(a["restarts"] + 1 for a in attempts)
    assert 6 <= interrupted <= 10, summary  # ended as soon as the window was full, not after 15 crashes
    assert attempts[-1]["outcome"] == "failed" and attempts[-1]["reason"].startswith("over budget"), summary
    print(f"ended over budget: {summary}")
