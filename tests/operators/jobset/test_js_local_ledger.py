"""The run's ledger after a short real run on the local target (the local runner's JobSet, pods as processes, the
local API server), through the launch operator whose synchronous path runs the trigger inline: a host loss (an
in-cluster restart) then a preemption of every slice (the JobSet completes below target; the same try follows it
with a new attempt). The ledger pushed as the `ledger` XCom and kept beside the checkpoints matches what happened:
one start per attempt and restart, the interruptions by kind, a decision per attempt, the steps with their loss."""

from __future__ import annotations

import json

import pytest

from mtc_provider.core.attempt import interruptions
from mtc_provider.core.attempt.attempt_records import read_attempts
from mtc_provider.core.attempt.ledger import HOST_LOSS, PREEMPTION, PREEMPTION_NEW_ATTEMPT, RunLedger
from mtc_provider.core.attempt.run_summary import record_path
from mtc_provider.operators.jobset import MtcJobSetOperator
from tests.support.js_helpers import FakeTI

pytestmark = pytest.mark.timeout(180)  # about 15 s

STEPS = 24
# The host loss comes before the first persistent save (period 20; the preemption forces one at 15), so its restart
# restores from the ramdisks: which local step depends on how far the other slice got (the fault fires a poll after
# the step line), the tier does not.
FAULTS = [{"kind": "sigkill_host", "at_step": 7, "slice": 1, "host": 0},
          {"kind": "sigterm_slice", "at_step": 14, "slice": 0},
          {"kind": "sigterm_slice", "at_step": 14, "slice": 1}]



def test_the_ledger_after_a_host_loss_and_a_preemption_matches_what_happened(tmp_path, home):
    run = "led"
    operator = MtcJobSetOperator(
        task_id="train", target={"kind": "local", "home": str(home)},
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": run, "base_output_directory": str(tmp_path / "bucket"), "steps": STEPS,
                       "enable_emergency_checkpoint": True, "local_checkpoint_directory": "/local",
                       "local_checkpoint_period": 2, "checkpoint_period": 20, "enable_autocheckpoint": True},
        workload={"jobset_name": run, "image": "local", "command": ["python3", "-m", "mtc_local.light_workload"],
                  "extra_flags": {"seed": 7, "step_time_ms": 300}, "max_restarts": 3,
                  "termination_grace_period_seconds": 15},
        deferrable=False, poll_interval=0.2, progress_interval=1, retries=2, crash_loop_attempts=2,
        fault_plan=FAULTS)
    ti = FakeTI(run_id=run, max_tries=2)
    result = operator.execute({"ti": ti})
    assert result["last_step"] == STEPS

    attempts = ti.xcoms["attempts"]
    ledger = RunLedger.from_dict(ti.xcoms["ledger"])
    summary = f"attempts {attempts}; ledger {json.dumps(ledger.to_dict())[:3000]}"
    # one start per attempt and in-cluster restart
    assert sorted((s.attempt, s.restart) for s in ledger.starts) == sorted(
        (a["attempt"], n) for a in attempts for n in range(a["restarts"] + 1)), summary
    # the interruptions by kind: the restarts in the cluster, the graceful ends followed by a new attempt
    counts = interruptions.count(read_attempts(attempts))
    kinds = [i.kind for i in ledger.interruptions]
    assert kinds.count(HOST_LOSS) + kinds.count(PREEMPTION) == counts["restarts"] >= 1, summary
    assert kinds.count(HOST_LOSS) >= 1, summary
    assert kinds.count(PREEMPTION_NEW_ATTEMPT) == counts["graceful"] >= 1, summary
    assert [(d.attempt, d.kind) for d in ledger.decisions] == [
        (a["attempt"], "succeed" if a["outcome"] == "finished" else "next-attempt-in-try") for a in attempts], summary
    # the steps the workload reported (sampled at the watch's ticks), with their loss and step time; each start
    # ran long enough (about two seconds, a second of load on two cores included) to be seen stepping
    steps = [p.step for p in ledger.steps]
    assert steps[-1] > 15 and all(p.loss is not None and p.step_seconds for p in ledger.steps), summary
    assert all(s.first_step_at is not None and s.first_step_at >= s.at for s in ledger.starts), summary
    # the saves the listings found; each later start restored, the host loss's from the surviving ramdisks (process
    # 0, whose events the trigger reads, saves only the persistent tier in this workload's emergency mode)
    assert {s.tier for s in ledger.saves} == {"persistent"} and 15 in {s.step for s in ledger.saves}, summary
    tiers = [s.restored_tier for s in sorted(ledger.starts, key=lambda s: (s.attempt, s.restart))]
    assert tiers[0] is None and None not in tiers[1:] and "local" in tiers, summary
    # the same ledger beside the checkpoints (`mtc status` reads it after the run ended)
    record = json.loads(open(record_path(str(tmp_path / "bucket" / run / "checkpoints"))).read())
    assert RunLedger.from_dict(record["ledger"]) == ledger
