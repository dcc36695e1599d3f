"""A compressed week at the guide's cadence: dozens of mixed interruptions, one try, and a ledger that says so.

The local target (the local runner's JobSet, pods as processes, the local API server) through the launch operator
(synchronous tries), with the light workload, which saves only where a TPU slice could. Time is compressed to one
"hour" = HOUR steps: persistent checkpoints "hourly", local (ramdisk) saves every LOCAL steps ("every 12 minutes"),
and an interruption every seven "hours" over a "week" of steps, cycling through what the guide's readers meet:
a host lost (an in-cluster restart that restores the ramdisk), a slice preempted gracefully (every slice saves at
the agreed step and exits 0: the JobSet completes below target and the next attempt follows in the same try), a
whole slice lost, a slice that hangs (a stall: deleted and followed), a node replaced (its ramdisk wiped, then lost),
and once a replacement whose ramdisk never mounts (a start-up timeout after progress: an interruption, not the
end). The run must reach its target in its first Airflow try within its budget, and the run ledger read back must
hold what happened, interruption by interruption: one start per attempt and per in-cluster restart, a stall per
hang, a start-up timeout for the mount, the attempts' decisions, and steps and saves over the whole week.
"""

from __future__ import annotations

import time

import pytest

from mtc_local.cluster.client import LocalCluster
from mtc_provider.core.attempt import ledger as L
from mtc_provider.operators.jobset import MtcDeleteJobSetOperator, MtcJobSetOperator
from tests.support.js_helpers import FakeTI

# A long rehearsal: `make soak` runs it beside the orchestrator-fault soak (CI does), `make test` leaves it out.
pytestmark = [pytest.mark.slow, pytest.mark.soak, pytest.mark.timeout(900)]

HOUR = 10  # steps
LOCAL = 2  # a local save every 12 "minutes"
DAYS = 7
STEPS = 24 * DAYS * HOUR
EVERY = 7 * HOUR  # an interruption every seven "hours": 23 over the week, plus the mount that never comes
CYCLE = ("host", "preemption", "slice", "hang", "node")


def _faults() -> list[dict]:
    plan = []
    for i, at in enumerate(range(EVERY // 2, STEPS - HOUR, EVERY)):
        kind, where = CYCLE[i % len(CYCLE)], i % 2
        if kind == "host":
            plan.append({"kind": "sigkill_host", "at_step": at, "slice": where, "host": 0})
        elif kind == "preemption":  # every slice is told (a maintenance event reaches the whole job)
            plan += [{"kind": "sigterm_slice", "at_step": at, "slice": s} for s in (0, 1)]
        elif kind == "slice":
            plan.append({"kind": "kill_slice", "at_step": at, "slice": where})
        elif kind == "hang":  # a collective that never returns stops every slice (the light workload's slices
            # step independently, so both are stopped)
            plan += [{"kind": "hang", "at_step": at, "slice": s} for s in (0, 1)]
        else:  # a replaced node: its ramdisk is gone, then its host
            plan += [{"kind": "wipe_ramdisk", "at_step": at, "slice": where, "host": 0},
                     {"kind": "sigkill_host", "at_step": at, "slice": where, "host": 0}]
    # the first in-cluster restart's pods never get their ramdisk (no `seconds`: the mount never comes)
    plan.append({"kind": "mount_failure", "slice": 1, "at_restart": 1})
    return plan



def test_a_compressed_week_of_interruptions_ends_in_one_try_and_the_ledger_says_what_happened(tmp_path, home):
    run_name, target = "week", {"kind": "local", "home": str(home)}
    faults = _faults()
    op = MtcJobSetOperator(
        task_id="train", target=target, slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": run_name, "base_output_directory": str(tmp_path / "bucket"), "steps": STEPS,
                       "enable_emergency_checkpoint": True, "local_checkpoint_directory": "/local",
                       "local_checkpoint_period": LOCAL, "checkpoint_period": HOUR, "enable_autocheckpoint": True},
        workload={"jobset_name": run_name, "image": "local", "command": ["python3", "-m", "mtc_local.light_workload"],
                  "extra_flags": {"seed": 11, "step_time_ms": 40}, "max_restarts": 3,
                  "termination_grace_period_seconds": 15},
        deferrable=False, poll_interval=0.2, retries=2, fault_plan=faults,
        # a hang and a mount are judged in seconds here (with room for a loaded machine), not in a large slice's minutes
        stall_timeout=15, first_step_floor=60, startup_timeout=30)
    ti = FakeTI(run_id="week", max_tries=2)
    started = time.monotonic()
    try:
        result = op.execute({"ti": ti})  # one try: it must not raise
    finally:
        MtcDeleteJobSetOperator(task_id="teardown", run_name=run_name, launch_task_id="train",
                                target=target).execute({"ti": ti})
    wall = time.monotonic() - started
    attempts, ledger = ti.xcoms["attempts"], L.RunLedger.from_dict(ti.xcoms["ledger"])
    fired = LocalCluster(str(home)).run_faults("default", run_name)
    kinds = [i.kind for i in ledger.interruptions]
    summary = (f"{wall:.0f}s, {len(fired)} faults fired, attempts "
               f"{[(a['attempt'], a['outcome'], a['restarts'], a['last_step']) for a in attempts]}, ledger "
               f"interruptions {kinds}")
    assert result["last_step"] == STEPS, summary
    assert {a["try"] for a in attempts} == {1}, summary  # no Airflow retry spent, no budget verdict
    assert len(fired) == len(faults), summary  # every interruption of the week happened, each once

    # one start per attempt and per in-cluster restart, as the JobSets counted them
    assert sorted(s.key for s in ledger.starts) == sorted(
        (a["attempt"], r) for a in attempts for r in range(a["restarts"] + 1)), summary
    # each hang was a stall, the mount that never came a start-up timeout: each followed in the same try
    hangs = sum(1 for f in fired if f["kind"] == "hang") // 2
    assert kinds.count(L.STALL) == hangs and kinds.count(L.STARTUP_TIMEOUT) == 1, summary
    # every interruption the attempts' records count is in the ledger: their ends and their in-cluster restarts
    ended = [a for a in attempts if a["outcome"] != "finished"]
    in_cluster = sum(a["restarts"] for a in attempts)
    assert len(kinds) == len(ended) + in_cluster, summary
    assert kinds.count(L.PREEMPTION) + kinds.count(L.HOST_LOSS) == in_cluster, summary
    # one decision per attempt: the ended ones followed in this try, the last one reached the target
    decisions = sorted(ledger.decisions, key=lambda d: d.attempt)
    assert [d.attempt for d in decisions] == [a["attempt"] for a in attempts], summary
    assert {d.kind for d in decisions[:-1]} == {L.NEXT_ATTEMPT_IN_TRY} and decisions[-1].kind == "succeed", summary
    # the restores went forward: each start after the first restored a step, none beyond the target
    restored = [s.restored_step for s in sorted(ledger.starts, key=lambda s: s.at) if s.restored_step is not None]
    assert restored and max(restored) < STEPS, summary
    # the steps and the saves cover the whole week
    # (the last flush may come before the final step's event is read: within an "hour" of the target)
    assert ledger.steps[0].step <= HOUR and ledger.steps[-1].step >= STEPS - HOUR, summary
    persistent = [s.step for s in ledger.saves if s.tier == L.PERSISTENT]
    assert persistent and max(persistent) == STEPS, summary
    print(f"a compressed week in one try: {summary}")
