"""A GKE-shaped run 30 hours in, written out by hand: its run ledger (the dict form the launch task pushes as its
`ledger` XCom) and what Airflow holds without one (the `attempts` and `progress` XComs, the launch task's tries).

Step time 2 s (MaxText's `seconds:` on every line), no persistent checkpoint yet: MTC replicator backups every 900
steps (30 min), local-tier saves every 100 steps.
- try 1, attempt 1 (JobSet train-a1): submitted at 0, pods start at 60 s, first step at 300 s (compilation), a
  preemption at 10 h ends it at step 17850; the same try follows it (restorable progress: backup 17100);
- try 1, attempt 2: pods start 240 s after (10 h + 240 s), restore backup 17100 (90 s), first step at 10 h + 480 s;
  a host loss fails it at 18 h at step 31260; Airflow retries (try 1 used up);
- try 2, attempt 3: pods start at 18 h + 360 s, restore backup 30600 (90 s), first step at 18 h + 600 s; a graceful
  preemption handled in the cluster at 24 h (step 41100): the pods restart at 24 h + 120 s, restore the local
  tier's step 41000 (30 s), first step at 24 h + 240 s; still training at 30 h (step 51680).
Gaps between an interruption and the next start: 240 + 360 + 120 s = 12 minutes.

The ledger's intervals, by hand (first step to end, less the re-done steps at 2 s):
  start 1: 36000 - 300 = 35700, less (17850 - 17100) x 2 = 1500 -> 34200
  start 2: 64800 - 36480 = 28320, less (31260 - 30600) x 2 = 1320 -> 27000
  start 3: 86400 - 65400 = 21000, less (41100 - 41000) x 2 = 200 -> 20800
  start 4: 108000 - 86640 = 21360
  productive 103360 s of 108000 s: 95.70 %.
"""

from __future__ import annotations

from mtc_provider.core.attempt.attempt_records import read_attempts
from mtc_provider.core.view.run_page import RunFacts, Try

T0 = 1_800_000_000.0
H = 3600.0
STEP_S = 2.0
NOW = T0 + 30 * H
EXPECTED_PRODUCTIVE_S = 34200 + 27000 + 20800 + 21360
EXPECTED_GOODPUT = EXPECTED_PRODUCTIVE_S / (30 * H)

# (attempt, restart, at, first_step_at, restored_step, restored_tier, restore_seconds, stop, reached)
STARTS = [
    (1, 0, T0 + 60, T0 + 300, None, None, None, T0 + 10 * H, 17850),
    (2, 0, T0 + 10 * H + 240, T0 + 10 * H + 480, 17100, "replicator", 90.0, T0 + 18 * H, 31260),
    (3, 0, T0 + 18 * H + 360, T0 + 18 * H + 600, 30600, "replicator", 90.0, T0 + 24 * H, 41100),
    (3, 1, T0 + 24 * H + 120, T0 + 24 * H + 240, 41000, "local", 30.0, NOW, 51680),
]
INTERRUPTIONS = [
    {"at": T0 + 10 * H, "attempt": 1, "kind": "preemption-new-attempt", "step": 17850},
    {"at": T0 + 18 * H, "attempt": 2, "kind": "host-loss", "step": 31260},
    {"at": T0 + 24 * H, "attempt": 3, "kind": "preemption", "step": 41100},
]


def _step_at(start, t: float) -> int:
    first, restored = start[3], start[4] or 0
    return restored + int((t - first) / STEP_S)


def ledger() -> dict:
    starts, steps, saves = [], [], []
    for start in STARTS:
        attempt, restart, at, first, restored, tier, seconds, stop, _ = start
        starts.append({"attempt": attempt, "restart": restart, "at": at, "first_step_at": first,
                       "restored_step": restored, "restored_tier": tier, "restore_seconds": seconds})
        t = first
        while t <= stop:  # downsampled: one (at, step) every 30 minutes, as a long run's ledger keeps them
            steps.append([t, _step_at(start, t), 2.3, STEP_S])
            t += 1800.0
        for step in range(((start[4] or 0) // 100 + 1) * 100, _step_at(start, stop) + 1, 100):
            at_ = first + (step - (restored or 0)) * STEP_S
            saves.append({"at": at_, "step": step, "tier": "local", "complete": True})
            if step % 900 == 0:
                saves.append({"at": at_ + 60, "step": step, "tier": "replicator", "complete": at_ + 60 < NOW - 1200})
    return {"version": 1, "starts": starts, "steps": steps, "saves": saves,
            "interruptions": [dict(i) for i in INTERRUPTIONS],
            "decisions": [{"at": T0 + 10 * H + 30, "attempt": 1, "kind": "next-attempt-in-try",
                           "reason": "completed below target"},
                          {"at": T0 + 18 * H + 20, "attempt": 2, "kind": "retry", "reason": "JobSet failed"}]}


ATTEMPTS = [
    {"attempt": 1, "try": 1, "jobset": "train-a1", "start": T0, "end": T0 + 10 * H + 30, "outcome": "disrupted",
     "restarts": 0, "last_step": 17100, "reason": "completed below target", "interruption": "graceful",
     "in_try": True},
    {"attempt": 2, "try": 1, "jobset": "train-a2", "start": T0 + 10 * H + 60, "end": T0 + 18 * H + 20,
     "outcome": "disrupted", "restarts": 0, "last_step": 30600, "reason": "JobSet failed", "interruption": "failed",
     "in_try": False},
    {"attempt": 3, "try": 2, "jobset": "train-a3", "start": T0 + 18 * H + 240, "end": None, "outcome": None,
     "restarts": 0, "last_step": 30600, "reason": ""},
]
# the trigger's progress report a minute ago (core.measure.progress_report.ProgressReport.to_xcom + the signal's
# figures): its newest checkpoint is a replicator backup, and the live JobSet has restarted once
PROGRESS = {"step": 51650, "target_step": 100000, "steps_per_hour": 1800.0, "eta_seconds": 96700.0,
            "newest_checkpoint": 50400, "restarts": 1, "attempt": 3, "source": "workload-log",
            "updated_at": NOW - 60, "percent": 51.6, "alive_step": 51650, "alive_source": "workload-log",
            "restorable_step": 50400, "restorable_source": "replicator-backup"}


def shifted(value, by: float):
    """`value` with every time in it moved by `by` seconds (the ledger's, the records', the progress report's)."""
    if isinstance(value, list) and value and isinstance(value[0], (int, float)):
        return [value[0] + by, *value[1:]]  # a ledger step row [at, step, loss, step_seconds]
    if isinstance(value, list):
        return [shifted(v, by) for v in value]
    if isinstance(value, dict):
        return {k: (v + by if k in TIMES and isinstance(v, (int, float)) else shifted(v, by)) for k, v in value.items()}
    return value


TIMES = ("at", "first_step_at", "start", "end", "updated_at")


def facts(with_ledger: bool = True, **extra) -> RunFacts:
    base = dict(dag_id="train_day", run_id="manual__day", run_state="running", launch_task_id="train",
                tries=[Try(1, "up_for_retry", T0 - 10, T0 + 18 * H + 30), Try(2, "deferred", T0 + 18 * H + 200, None)],
                attempts=[dict(a) for a in ATTEMPTS], progress=dict(PROGRESS),
                checkpoint_dir="gs://ckpt/day/checkpoints", target_step=100000, events=None, persistent_steps=None,
                now=NOW, run_start=T0 - 20)
    if with_ledger:
        base["ledger"] = ledger()
    base.update(extra)
    return RunFacts(**{**base, "attempts": read_attempts(base["attempts"])})  # as adapters.airflow_run reads them
