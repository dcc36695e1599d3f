"""The soak's seeded schedule of orchestrator faults (pure): which fault, how long after training started, for how
long; and the runner's fault plan of the same seed (an in-cluster restart whose pods cannot pull their image for
a while, and one real attempt failure).

Airflow's own components fail too (issue #33 item 11): the metadata database and the broker unreachable (refused
connections, open ones reset) and an api-server replica killed. The api-server kill is always last: it aims at
train's resume when training ends (the one resume a run whose attempts make progress is sure to have: the trigger
fires and the try resumes through the Execution API), and is restarted after `APISERVER_DOWN_S`.

Orchestrator faults are carried out by the test, one after the other, in the seeded order, each `gap` seconds after
the previous one ended (an injector that needs `train` deferred waits for it, so the times are the earliest ones).
Replay a soak with `MTC_SOAK_SEED=<seed>`: the same order, spacing, durations and runner faults.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_SEED = 20261201
SEED_ENV = "MTC_SOAK_SEED"

TRIGGERER_STOP = "triggerer_stop"  # SIGSTOP the triggerer holding train's trigger until it moved, then SIGCONT
TRIGGERER_KILL = "triggerer_kill"  # SIGKILL it; restarted once the other took the trigger over
API_OUTAGE = "api_outage"  # the Kubernetes API: 503 with Retry-After, then refused connections
API_HANG = "api_hang"  # the Kubernetes API accepts requests and never answers
LISTING_OUTAGE = "listing_outage"  # the bucket's listings answer 503
WATCH_CUT = "watch_cut"  # every open watch is cut
WORKER_KILL = "worker_kill"  # SIGKILL the Celery worker's tree while train is deferred; restarted
DATABASE_OUTAGE = "database_outage"  # the metadata database refuses Airflow's connections (60-75 s, seeded)
BROKER_OUTAGE = "broker_outage"  # Redis refuses Airflow's connections
APISERVER_KILL = "apiserver_kill"  # SIGKILL one api-server replica as train resumes; restarted after a while
SHUFFLED = (TRIGGERER_STOP, TRIGGERER_KILL, API_OUTAGE, API_HANG, LISTING_OUTAGE, WATCH_CUT, WORKER_KILL,
            DATABASE_OUTAGE, BROKER_OUTAGE)
KINDS = (*SHUFFLED, APISERVER_KILL)
# How long each fault holds (seconds); the stop and kill last until the trigger moved.
DURATIONS = {API_OUTAGE: 120.0, API_HANG: 45.0, LISTING_OUTAGE: 60.0, BROKER_OUTAGE: 60.0}
DATABASE_OUTAGE_S = (60.0, 75.0)  # the "connections refused for 60-75 s"
APISERVER_DOWN_S = 45.0  # the api-server outage during a resume
UNAVAILABLE_SHARE = 0.5  # of the API outage: 503 first, refused connections for the rest


@dataclass(frozen=True)
class Fault:
    kind: str
    at_s: float  # earliest start, seconds after training started
    seconds: float = 0.0  # how long it holds (0: until done, e.g. the trigger moved)

    @property
    def ends_s(self) -> float:
        return self.at_s + self.seconds


@dataclass(frozen=True)
class Schedule:
    seed: int
    faults: tuple[Fault, ...]
    fault_plan: tuple[dict[str, Any], ...]  # the runner's faults (the DAG's fault_plan)

    def describe(self) -> str:
        return json.dumps({"seed": self.seed, "replay": f"{SEED_ENV}={self.seed}",
                           "faults": [asdict(f) for f in self.faults], "fault_plan": list(self.fault_plan)}, indent=1)


def seed_from_env(default: int = DEFAULT_SEED) -> int:
    raw = os.environ.get(SEED_ENV, "").strip()
    return int(raw) if raw else default


def make_schedule(seed: int, first_s: float = 45.0, gap: tuple[float, float] = (20.0, 35.0),
                  stop_kill_s: float = 25.0, pull_seconds: float = 40.0,
                  restart_s: tuple[int, int] = (60, 110), failure_s: tuple[int, int] = (330, 420)) -> Schedule:
    """Every orchestrator fault once, in a seeded order, spaced by seeded gaps; the runner's plan from the same seed.

    `stop_kill_s` is the time a triggerer stop or kill is expected to take (the trigger moving), for spacing.
    The runner's plan: a host SIGKILL `restart_s` seconds after the first JobSet's creation (an in-cluster restart,
    max_restarts 1) whose slice's restarted pods cannot pull their image for `pull_seconds`; a second host SIGKILL
    `failure_s` seconds after it: past max_restarts, the attempt fails for real and Airflow's retry resubmits it.
    Seconds, not steps, so the runner's faults keep their place among the orchestrator faults however fast the
    machine trains (the first JobSet is created within a second of train's first deferral, the schedule's origin).
    """
    rng = random.Random(seed)
    kinds = list(SHUFFLED)
    rng.shuffle(kinds)
    faults, at = [], first_s
    for kind in kinds:
        seconds = round(rng.uniform(*DATABASE_OUTAGE_S), 1) if kind == DATABASE_OUTAGE else DURATIONS.get(kind, 0.0)
        faults.append(Fault(kind, round(at, 1), seconds))
        took = seconds or (stop_kill_s if kind in (TRIGGERER_STOP, TRIGGERER_KILL) else 5.0)
        at += took + rng.uniform(*gap)
    faults.append(Fault(APISERVER_KILL, round(at, 1), APISERVER_DOWN_S))  # waits for the resume at training's end
    restart_at, failure_at = rng.randint(*restart_s), rng.randint(*failure_s)
    restart_slice = rng.randrange(2)
    plan = (
        {"kind": "sigkill_host", "at_seconds": restart_at, "slice": restart_slice, "host": 0},
        {"kind": "image_pull", "slice": restart_slice, "at_restart": 1, "seconds": pull_seconds},
        {"kind": "sigkill_host", "at_seconds": failure_at, "slice": 1 - restart_slice, "host": 0},
    )
    return Schedule(seed, tuple(faults), plan)
