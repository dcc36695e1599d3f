"""The demo summary's in-cluster restart count on every fault plan of the chaos suite (issue #26), fast.

Each schedule the chaos suite can draw (chaos_schedule.make_schedule: the default seed, and others), and the demo's
two host kills on one slice one step apart, are played as the JobSet statuses those faults produce: a hard fault
(sigkill_host, wipe_ramdisk, kill_slice) is one failurePolicy restart of the attempt's JobSet (`status.restarts`
+1, kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go `Restarts`); a slice's SIGTERM completes the JobSet
below the target (MaxText exits 0 when preempted); a hang is the trigger's stall verdict; the Airflow kill stops a
try while its trigger waits and the next try reattaches. The real launch operator and JobSet trigger run each try
against the in-memory JobSet API (tests/doubles/memory_jobset.py) and keep their attempt records in its run lock;
the demo's summary (scripts/demo.py build_summary) then reads the `attempts` XCom they pushed. The count must equal
the plan's hard faults, per attempt.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import threading
from pathlib import Path

import pytest
from airflow.sdk.exceptions import TaskDeferred

from chaos_schedule import AIRFLOW_KILL, DEFAULT_SEED, HARD_KINDS, Fault, Schedule, make_schedule
from mtc_provider import targets
from mtc_provider.operators.jobset import ATTEMPTS_XCOM_KEY, JobSetAttemptFailed
from tests.doubles.memory_jobset import (
    AsyncMemoryJobSetApi,
    MemoryJobSetApi,
    MemoryJobSetCluster,
    status_completed,
    status_restarting,
    status_running,
)
from tests.support.js_helpers import FakeTI, ckpt_dir, finalize, launch

REPO = Path(__file__).resolve().parents[2]
DEMO_PLAN = Schedule(0, (Fault("sigkill_host", 8, 0, 0), Fault("sigkill_host", 9, 0, 0)), steps=16)
SCHEDULES = [make_schedule(seed) for seed in (DEFAULT_SEED, 1, 2, 3, 4, 5)] + [DEMO_PLAN]


@pytest.fixture
def cluster():
    cluster = MemoryJobSetCluster()
    with targets.registered_jobset_api("local", lambda c: MemoryJobSetApi(cluster),
                                       lambda c: AsyncMemoryJobSetApi(cluster)):
        yield cluster


def build_summary():
    spec = importlib.util.spec_from_file_location("mtc_demo_script", REPO / "scripts" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_summary


def attempts_of(schedule: Schedule) -> list[list[Fault]]:
    """The faults of each JobSet (attempt): a slice's SIGTERM and a hang end one; the others stay inside it."""
    attempts: list[list[Fault]] = [[]]
    for fault in schedule.faults:
        attempts[-1].append(fault)
        if fault.kind in ("sigterm_slice", "hang"):
            attempts.append([])
    return attempts


def script(tmp_path, faults: list[Fault], last: bool, target: int, flags: dict) -> list:
    """The statuses one attempt's JobSet goes through; `flags` marks the hang and the Airflow kill when reached."""
    frames, restarts = [status_running()], 0
    for fault in faults:
        if fault.kind in HARD_KINDS:
            restarts += 1
            frames += [status_restarting(restarts=restarts), status_running(restarts=restarts)]
        elif fault.kind == AIRFLOW_KILL:
            def killed(obj, r=restarts):  # SIGKILL of the try's process: its trigger stops at this status
                flags["kill"].set()
                flags["task"].cancel()
                return status_running(restarts=r)
            frames.append(killed)
        elif fault.kind == "sigterm_slice":
            def preempted(obj, step=fault.at_step, r=restarts):
                finalize(ckpt_dir(tmp_path), step)
                return status_completed(restarts=r)
            frames.append(preempted)
        elif fault.kind == "hang":
            def hung(obj, step=fault.at_step, r=restarts):
                finalize(ckpt_dir(tmp_path), step)
                flags["hang"].set()
                return status_running(restarts=r)
            frames.append(hung)
    if last:
        def done(obj, r=restarts):
            finalize(ckpt_dir(tmp_path), target)
            return status_completed(restarts=r)
        frames.append(done)
    return frames


async def first_event(trigger, flags) -> dict | None:
    """The trigger's event; None when the Airflow kill stopped the try first (its trigger is cancelled)."""
    async def stall_when_hung(state):  # the stall verdict the trigger reaches after stall_timeout of no progress
        return "stalled: no new finalized checkpoint (hang)" if flags["hang"].is_set() else None

    trigger.watch, trigger.check_stall = dataclasses.replace(trigger.watch, stall_timeout=35.0), stall_when_hung
    flags["task"] = task = asyncio.ensure_future(_payload(trigger))
    try:
        return await task
    except asyncio.CancelledError:
        assert flags["kill"].is_set()
        flags["kill"].clear()
        return None


async def _payload(trigger):
    async for event in trigger.run():
        return event.payload


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: f"seed-{s.seed}")
def test_summary_counts_every_in_cluster_restart_of_the_plan(schedule, tmp_path, cluster):
    attempts = attempts_of(schedule)
    target = schedule.steps
    flags = [{"kill": threading.Event(), "hang": threading.Event()} for _ in attempts]  # the n-th JobSet's
    cluster.plan(*[script(tmp_path, faults, i == len(attempts) - 1, target, flags[i])
                   for i, faults in enumerate(attempts)])
    op = launch(str(tmp_path), deferrable=True, retries=len(attempts) + 2,
                checkpointing={"run_name": "llama", "base_output_directory": f"{tmp_path}/out", "steps": target,
                               "checkpoint_period": 5})
    ti, result = FakeTI(max_tries=len(attempts) + 2), None
    context = {"ti": ti, "run_id": ti.run_id}
    call = lambda: op.execute(context)  # noqa: E731 - a new try
    for _ in range(2 * len(attempts) + 2):  # every attempt's end, or the Airflow kill and the reattach
        try:  # a try that finds the attempt ended with training done takes its result (no deferral)
            result = call()
            break
        except TaskDeferred as deferred:  # from a new try, or from an end followed in the same try (progress)
            trigger = deferred.trigger
            event = asyncio.run(first_event(trigger, flags[len(cluster.created) - 1]))
            if event is None:  # SIGKILLed while deferred: the next try must reattach
                ti.try_number += 1
                call = lambda: op.execute(context)  # noqa: E731
                continue
            call = lambda event=event: op.execute_complete(context, event)  # noqa: E731
        except JobSetAttemptFailed:
            ti.try_number += 1
            call = lambda: op.execute(context)  # noqa: E731
    assert result is not None and result["last_step"] == target, ti.xcoms.get("jobset")
    summary = build_summary()({"run_state": "success", "train_tries": ti.try_number, "train": result,
                               "attempts": ti.xcoms[ATTEMPTS_XCOM_KEY]}, events=[], faults=[], wall_s=1.0)
    hard = [sum(f.kind in HARD_KINDS for f in faults) for faults in attempts]
    assert summary["restarts_total"] == sum(hard) == sum(f.kind in HARD_KINDS for f in schedule.faults), (
        [(r["jobset"], r["restarts"], r["outcome"]) for r in summary["attempts"]], hard)
    assert [r["restarts"] for r in summary["attempts"]] == hard, summary["attempts"]
    assert len(cluster.created) == len(attempts)  # the kill's try reattached: no second JobSet for one attempt
    # every attempt that ended made progress (its preemption or hang step is finalized): followed in the same try, so
    # only the Airflow kill takes a new try
    assert ti.try_number == 1 + (1 if any(f.kind == AIRFLOW_KILL for f in schedule.faults) else 0)

