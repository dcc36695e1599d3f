"""The chaos suite's seeded fault schedule (pure): which fault, at which training step, on which slice/host.

Runner faults go into the DAG's `fault_plan` (the local runner fires each once per training run); the one
`airflow_kill` is carried out by the test itself (SIGKILL of the `airflow dags test` process while the train
task waits, then a re-run of the same logical date). Replay a run with `MTC_CHAOS_SEED=<seed>`.

Placement rules, so one run can finish inside the suite's time limit:
  * faults sit at distinct steps, `gap` apart (+-2), so a persistent checkpoint (every `persistent_period`
    steps) lands between two faults and the stall clock never runs through two recoveries;
  * the attempt-ending faults (sigterm_slice, hang: each costs an Airflow retry, whose delay grows
    exponentially with the try number) come in the first part of the run, the Airflow kill after them,
    so the task it kills is waiting on the last attempt.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_SEED = 20261108
SEED_ENV = "MTC_CHAOS_SEED"
HARD_KINDS = ("sigkill_host", "wipe_ramdisk", "kill_slice")  # processes die without saving
ENDING_KINDS = ("sigterm_slice", "hang")  # the attempt ends (preempted / stalled): one Airflow retry each
AIRFLOW_KILL = "airflow_kill"
MIX = {"sigkill_host": 4, "wipe_ramdisk": 2, "kill_slice": 1, "sigterm_slice": 1, "hang": 1, AIRFLOW_KILL: 1}


@dataclass(frozen=True)
class Fault:
    kind: str
    at_step: int
    slice: int | None = None
    host: int | None = None

    def runner_fault(self) -> dict[str, Any]:
        """The fault-plan entry for the local runner (slice/host given explicitly: the schedule is the replay)."""
        out: dict[str, Any] = {"kind": self.kind, "at_step": self.at_step, "slice": self.slice}
        if self.host is not None:
            out["host"] = self.host
        return out


@dataclass(frozen=True)
class Schedule:
    seed: int
    faults: tuple[Fault, ...]
    steps: int

    @property
    def fault_plan(self) -> list[dict[str, Any]]:
        return [f.runner_fault() for f in self.faults if f.kind != AIRFLOW_KILL]

    @property
    def airflow_kill_step(self) -> int:
        return next(f.at_step for f in self.faults if f.kind == AIRFLOW_KILL)

    def describe(self) -> str:
        """What to print on failure: enough to replay and to read the run's logs against."""
        return json.dumps({"seed": self.seed, "steps": self.steps, "replay": f"{SEED_ENV}={self.seed}",
                           "faults": [asdict(f) for f in self.faults]}, indent=1)


def seed_from_env(default: int = DEFAULT_SEED) -> int:
    raw = os.environ.get(SEED_ENV, "").strip()
    return int(raw) if raw else default


def make_schedule(seed: int, num_slices: int = 2, hosts_per_slice: int = 1, first_step: int = 10, gap: int = 9,
                  tail: int = 8) -> Schedule:
    """At least 10 faults (MIX) at distinct, spread steps; random order, slices and hosts from `seed`."""
    rng = random.Random(seed)
    kinds = [kind for kind, count in MIX.items() for _ in range(count) if kind != AIRFLOW_KILL]
    ending = [k for k in kinds if k in ENDING_KINDS]
    hard = [k for k in kinds if k not in ENDING_KINDS]
    rng.shuffle(hard)
    late = hard[:2]  # after the Airflow kill: only in-cluster restarts, no further retry delays
    early = ending + hard[2:]
    rng.shuffle(early)
    late_with_kill = late + [AIRFLOW_KILL]
    rng.shuffle(late_with_kill)
    order = early + late_with_kill
    faults, step = [], first_step
    for kind in order:
        slice_index = None if kind == AIRFLOW_KILL else rng.randrange(num_slices)
        host = rng.randrange(hosts_per_slice) if kind in ("sigkill_host", "wipe_ramdisk") else None
        faults.append(Fault(kind, step, slice_index, host))
        step += gap + rng.randint(-2, 2)
    return Schedule(seed, tuple(faults), steps=faults[-1].at_step + tail)
