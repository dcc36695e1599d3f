"""Benchmark 4: triggerer load. 1,000 of our triggers in one asyncio event loop: loop lag p50/p99 and CPU.

Scenarios, each in a fresh event loop, interleaved over the repeats:

- baseline: 1,000 idle tasks looping on `asyncio.sleep(poll_interval)`;
- checkpoint: 1,000 `CheckpointProgressTrigger`s, each polling its own local checkpoint directory (listing in a
  worker thread, as in the triggerer) while a writer thread commits new steps; one in ten has a target one
  step ahead, so it fires when that step lands;
- jobset: 1,000 `JobSetTrigger`s watching JobSets of the in-memory api (`tests/doubles/memory_jobset.py`), paced so that each
  JobSet changes status every 0.5-1.5 poll intervals (restarts included) and one in ten completes after one;
- mixed: 500 of each.

A probe task sleeps 10 ms in a loop and records how late it wakes (the event-loop lag every trigger in the
loop suffers); CPU = process time / wall time over the measured window (worker threads included). Trigger
starts are spread over one poll interval, as tasks defer at different times in a real triggerer.
Goal: p99 lag under 100 ms.

    python -m benchmarks.triggerer_load [--quick]
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")  # no per-checkpoint info lines on stdout

from benchmarks.common import (  # noqa: E402
    argument_parser, interleaved, median, print_table, ratio, result_path, write_result,
)

PROBE_S = 0.010
GOAL_P99_S = 0.100
CONNECTION = {"kind": "local", "home": "/nonexistent/mtc-bench-home"}


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


async def probe(samples: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(PROBE_S)
        samples.append(time.perf_counter() - t0 - PROBE_S)


# ---- checkpoint triggers over local directories -----------------------------------------------------------
def commit_step(directory: Path, step: int) -> None:
    step_dir = directory / str(step)
    step_dir.mkdir(parents=True, exist_ok=True)
    (step_dir / "_CHECKPOINT_METADATA").write_text("{}")
    (step_dir / "commit_success.txt").write_text("ok")


class CountingStore:
    """Wraps the trigger's real async store (a local directory, listed in a worker thread) to count polls."""

    def __init__(self, inner: Any, counter: dict[str, int]) -> None:
        self.inner, self.counter = inner, counter

    async def newest(self, after: int | None = None):
        self.counter["listings"] += 1
        return await self.inner.newest(after)


class StepWriter(threading.Thread):
    """Commits the next step in a few directories every 0.1 s, off the event loop (training does this)."""

    def __init__(self, directories: list[Path], first_step: int, per_second: int) -> None:
        super().__init__(daemon=True)
        self.directories, self.per_second = directories, per_second
        self.next_step = {d: first_step for d in directories}
        self.stop_event = threading.Event()
        self.written = 0

    def run(self) -> None:
        rng = random.Random(1)
        while not self.stop_event.wait(0.1):
            for directory in rng.sample(self.directories, min(len(self.directories), max(1, self.per_second // 10))):
                commit_step(directory, self.next_step[directory])
                self.next_step[directory] += 1
                self.written += 1


# ---- JobSet triggers over the in-memory api -----------------------------------------------------------------
def paced_api_class():
    from tests.doubles.memory_jobset import AsyncMemoryJobSetApi

    class PacedAsyncMemoryJobSetApi(AsyncMemoryJobSetApi):
        """The in-memory watch, but the JobSet moves to its next frame only every `interval` seconds (jittered),
        like a real JobSet whose status changes now and then, instead of as fast as it is read."""

        interval = 5.0
        delivered = 0

        async def watch(self, namespace, name, resource_version=None):
            rng = random.Random(hash(name))
            first = True
            async for event in super().watch(namespace, name, resource_version):
                type(self).delivered += 1
                yield event
                if not first and event.type != "DELETED":
                    await asyncio.sleep(self.interval * rng.uniform(0.5, 1.5))
                first = False

    return PacedAsyncMemoryJobSetApi


def jobset_script(index: int, frames: int, completes: bool) -> list[dict[str, Any]]:
    from tests.doubles.memory_jobset import status_completed, status_restarting, status_running

    script: list[dict[str, Any]] = []
    restarts = 0
    for frame in range(frames):
        if frame % 4 == 3:
            restarts += 1
            script.append(status_restarting(restarts=restarts))
        else:
            script.append(status_running(restarts=restarts))
    return script + [status_completed(restarts=restarts)] if completes else script


# ---- one scenario -------------------------------------------------------------------------------------------
async def scenario(kind: str, n: int, duration: float, poll: float, scratch: Path) -> dict[str, Any]:
    from mtc_provider import targets
    from tests.doubles.memory_jobset import MemoryJobSetApi, MemoryJobSetCluster
    from mtc_provider.triggers import checkpoint as checkpoint_triggers
    from mtc_provider.triggers.checkpoint import CheckpointProgressTrigger
    from mtc_provider.core.attempt.launch_options import WatchSettings, WatchTimes
    from mtc_provider.triggers.jobset import JobSetTrigger

    n_checkpoint = {"baseline": 0, "checkpoint": n, "jobset": 0, "mixed": n // 2}[kind]
    n_jobset = {"baseline": 0, "checkpoint": 0, "jobset": n, "mixed": n - n // 2}[kind]
    rng = random.Random(0)
    counter = {"listings": 0, "events": 0}
    stop = asyncio.Event()
    samples: list[float] = []
    loop = asyncio.get_running_loop()
    # As in the triggerer: asyncio.to_thread runs on the loop's default executor (min(32, cpus + 4) threads).

    directories = []
    for i in range(n_checkpoint):
        directory = scratch / f"run{i}" / "checkpoints"
        for step in range(1, 6):
            commit_step(directory, step)
        directories.append(directory)
    writer = StepWriter(directories, 6, per_second=max(1, n_checkpoint // 5)) if directories else None

    cluster = MemoryJobSetCluster()
    api_class = paced_api_class()
    api_class.delivered, api_class.interval = 0, poll  # a JobSet changes status about once per poll interval
    frames = int(duration / api_class.interval) + 6
    for i in range(n_jobset):
        completes = i % 10 == 0
        cluster.plan(jobset_script(i, 1 if completes else frames, completes))
        cluster.create("default", {"metadata": {"name": f"train-{i}", "labels": {}}, "spec": {}})

    real_open = checkpoint_triggers.open_async_store
    checkpoint_triggers.open_async_store = lambda d, c, *chain: CountingStore(real_open(d, c, *chain), counter)

    async def run_trigger(trigger: Any, delay: float) -> None:
        await asyncio.sleep(delay)
        async for _event in trigger.run():
            counter["events"] += 1

    async def idle(delay: float) -> None:
        await asyncio.sleep(delay)
        while True:
            await asyncio.sleep(poll)

    tasks = []
    with targets.registered_jobset_api("local", lambda c: MemoryJobSetApi(cluster), lambda c: api_class(cluster)):
        try:
            probe_task = asyncio.create_task(probe(samples, stop))
            cpu0, wall0 = time.process_time(), time.perf_counter()
            if writer:
                writer.start()
            if kind == "baseline":
                tasks = [asyncio.create_task(idle(rng.uniform(0, poll))) for _ in range(n)]
            for i, directory in enumerate(directories):
                trigger = CheckpointProgressTrigger(str(directory), target_step=6 if i % 10 == 0 else 10**9,
                                                    stall_timeout=10**6, poll_interval=poll)
                tasks.append(asyncio.create_task(run_trigger(trigger, rng.uniform(0, poll))))
            for i in range(n_jobset):
                trigger = JobSetTrigger(connection=CONNECTION, namespace="default", name=f"train-{i}",
                                        watch=WatchSettings(times=WatchTimes(poll_interval=poll)))
                tasks.append(asyncio.create_task(run_trigger(trigger, rng.uniform(0, poll))))
            await asyncio.sleep(duration)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            stop.set()
            await probe_task
        finally:
            checkpoint_triggers.open_async_store = real_open
            if writer:
                writer.stop_event.set()
                writer.join()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await loop.shutdown_default_executor()
    return {
        "kind": kind, "triggers": n_checkpoint + n_jobset, "idle_tasks": n if kind == "baseline" else 0,
        "wall_s": round(wall, 3), "cpu_fraction": cpu / wall, "probe_samples": len(samples),
        "lag_p50_ms": 1000 * percentile(samples, 50), "lag_p99_ms": 1000 * percentile(samples, 99),
        "lag_max_ms": 1000 * max(samples), "listings": counter["listings"],
        "listings_per_s": counter["listings"] / wall, "watch_events": api_class.delivered,
        "watch_events_per_s": api_class.delivered / wall, "trigger_events": counter["events"],
        "steps_written": writer.written if writer else 0,
    }


def run_scenario(kind: str, n: int, duration: float, poll: float) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="mtc-bench-triggerer-"))
    try:
        result = asyncio.run(scenario(kind, n, duration, poll, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{kind}: p50 {result['lag_p50_ms']:.2f} ms, p99 {result['lag_p99_ms']:.2f} ms, "
          f"cpu {result['cpu_fraction']:.2f}", flush=True)
    return result


def main() -> None:
    parser = argument_parser(__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=None)
    parser.add_argument("--duration", type=float, default=None, help="seconds measured per scenario")
    parser.add_argument("--poll-interval", type=float, default=None,
                        help="poll_interval of every trigger, default 5 s (2 s with --quick); their defaults are "
                             "60 s and 30 s. JobSets change status about this often too")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    n = args.triggers or (100 if args.quick else 1000)
    duration = args.duration or (6.0 if args.quick else 20.0)
    repeats = args.repeats or (1 if args.quick else 2)
    poll = args.poll_interval or (2.0 if args.quick else 5.0)
    kinds = ["baseline", "checkpoint", "jobset", "mixed"]
    runs = interleaved({k: (lambda k=k: run_scenario(k, n, duration, poll)) for k in kinds}, repeats)
    summary = {}
    for kind in kinds:
        summary[kind] = {key: median([r[key] for r in runs[kind]]) for key in
                         ("lag_p50_ms", "lag_p99_ms", "lag_max_ms", "cpu_fraction", "listings_per_s",
                          "watch_events_per_s", "trigger_events")}
    base = summary["baseline"]
    for kind in kinds:
        summary[kind]["p99_over_baseline"] = ratio(summary[kind]["lag_p99_ms"], base["lag_p99_ms"])
        summary[kind]["p50_over_baseline"] = ratio(summary[kind]["lag_p50_ms"], base["lag_p50_ms"])
        summary[kind]["goal_met"] = summary[kind]["lag_p99_ms"] < GOAL_P99_S * 1000
    print_table(f"Triggerer load: {n} triggers, one event loop, {duration:.0f} s per scenario, median of {repeats}",
                ["scenario", "lag p50 ms", "lag p99 ms", "lag max ms", "CPU", "listings/s", "watch events/s",
                 "trigger events", "p99 / baseline", "p99 < 100 ms"],
                [[k, s["lag_p50_ms"], s["lag_p99_ms"], s["lag_max_ms"], s["cpu_fraction"], s["listings_per_s"],
                  s["watch_events_per_s"], s["trigger_events"], s["p99_over_baseline"], s["goal_met"]]
                 for k, s in summary.items()])
    result = {"parameters": {"triggers": n, "duration_s": duration, "poll_interval_s": poll,
                             "repeats": repeats, "probe_s": PROBE_S, "goal_p99_ms": GOAL_P99_S * 1000},
              "runs": runs, "summary": summary,
              "goal_met": all(summary[k]["goal_met"] for k in ("checkpoint", "jobset", "mixed"))}
    path = write_result(result_path("triggerer_load", args.quick, args.output), "triggerer_load", result)
    print(f"result: {path}")


if __name__ == "__main__":
    main()
