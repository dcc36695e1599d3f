"""Airflow's LocalExecutor, with what every launch try imports on first use imported once, before its workers fork.

    [core] executor = mtc_provider.executors.local.PreloadLocalExecutor

Airflow 3.3's LocalExecutor forks its `parallelism` worker processes from the scheduler in `start()` when
multiprocessing's start method is `fork` (airflow/executors/local_executor.py: `_spawn_workers_with_gc_freeze`);
each worker runs a try through `supervise_task`, whose `WatchedSubprocess.start` forks the task process with
`os.fork()` (airflow/sdk/execution_time/supervisor.py; fork+exec on macOS only). So what the scheduler imported
before `start()` is in every task process already: this executor imports `mtc_provider.preload.PRELOAD` there,
once per scheduler start (seconds, and ~150 MB shared copy-on-write), instead of in every try.

With the `forkserver` start method (Python 3.14's default on Linux; Airflow's `[scheduler] mp_start_method`) the
workers are forked from the forkserver process instead, so the modules are added to its preload list
(`multiprocessing.set_forkserver_preload`, after whatever `[scheduler] mp_forkserver_preload` already named), and
the forkserver is started here, so its imports happen at the scheduler's start, not in the first try's wait.
With `spawn` nothing is inherited and the executor says so in the scheduler's log.

A deferred task's resumed try has the same key as the try that deferred (same try number), and the worker reports
the deferring process's end as `success` when its supervisor returns (local_executor.py `_run_worker`), which can
be after the trigger fired and the scheduler queued, or a worker already ran, the resumed try. Airflow 3.3.2's
scheduler then applies that `success` to the resumed try: its resume-after-defer guard covers `scheduled` only
(jobs/scheduler_job_runner.py `process_executor_events`, apache/airflow#66431), `has_task` is false once the
workload is handed to a worker (the LocalExecutor never fills `running`), so a `queued` (apache/airflow#67287,
fixed on main by #68741, in no release installed here) or `running` (#72716, open) try is failed as "killed
externally" and its try is lost. This executor reports a process's end only when no other process of the same
try is queued or in flight, so the deferring one's can never reach the resumed try. Airflow 3.4's LocalExecutor
does the like itself (3.4.0b2 local_executor.py `_finish_dispatch`: "A resumed attempt reuses its key", a count
of dispatches per key that keeps the key `running` while another is live, so `has_task` holds), and there this
executor leaves it to Airflow.
"""

from __future__ import annotations

import multiprocessing
from collections import Counter

from airflow.executors.local_executor import LocalExecutor
from airflow.models.taskinstancekey import TaskInstanceKey

from mtc_provider.preload import PRELOAD, preload

# Airflow 3.4+ counts a try's dispatches itself (module docstring); its results are read differently there
AIRFLOW_COUNTS_DISPATCHES = hasattr(LocalExecutor, "_finish_dispatch")


class PreloadLocalExecutor(LocalExecutor):
    """The LocalExecutor whose worker processes (and so every task process) start with `PRELOAD` imported, and
    which never reports a deferring process's end against its resumed try (module docstring)."""

    def start(self) -> None:
        method = multiprocessing.get_start_method()
        if method == "fork":
            preload()
        elif method == "forkserver":
            from multiprocessing import forkserver

            multiprocessing.set_forkserver_preload([*_configured_forkserver_preload(), *PRELOAD])
            forkserver.ensure_running()  # its imports now, in the scheduler's start, not in the first try's wait
        else:
            self.log.warning("PreloadLocalExecutor: multiprocessing start method %r: the workers inherit nothing, "
                             "so each try imports the launch modules itself; set [scheduler] mp_start_method = "
                             "fork (or forkserver) for the preload", method)
        self._in_flight: Counter[TaskInstanceKey] = Counter()  # handed to a worker, not yet reported, by try
        super().start()

    def _process_workloads(self, workload_list) -> None:
        if not AIRFLOW_COUNTS_DISPATCHES:  # counted before the workers can take them: no result finds one uncounted
            self._in_flight.update(w.key for w in workload_list if isinstance(w.key, TaskInstanceKey))
        super()._process_workloads(workload_list)

    def _read_results(self) -> None:
        """LocalExecutor's (local_executor.py `_read_results`), without the end of a try's process while another
        process of the same try is queued or running: that end can only be the deferring process's, and the
        scheduler would apply it to the resumed one (module docstring). A task workload reports once, at its end
        (`ExecuteTask.running_state` is None)."""
        if AIRFLOW_COUNTS_DISPATCHES:
            return super()._read_results()
        while not self.result_queue.empty():
            key, state, _exc = self.result_queue.get()
            if isinstance(key, TaskInstanceKey) and self._superseded(key):
                self.log.info("PreloadLocalExecutor: %s ended (%s) while the same try runs again (a deferred task "
                              "resumed): not reported, so it cannot fail the resumed try", key, state)
                continue
            self.change_state(key, state)

    def _superseded(self, key: TaskInstanceKey) -> bool:
        """One process of `key` ended: whether another of the same try is still queued here or in flight (the two
        ends look alike, so whichever process of the try ends last is the one reported)."""
        self._in_flight[key] -= 1
        if self._in_flight[key] <= 0:
            del self._in_flight[key]
        return key in self._in_flight or key in self.queued_tasks


def _configured_forkserver_preload() -> list[str]:
    """What Airflow's own `mp_forkserver_preload` set (airflow.utils.process_utils.set_component_mp_start_method:
    the `[scheduler]` value, else `[core]`), so adding ours keeps it."""
    from airflow.configuration import conf

    raw = (conf.get("scheduler", "mp_forkserver_preload", fallback=None)
           or conf.get("core", "mp_forkserver_preload", fallback=None) or "")
    return [m.strip() for m in raw.split(",") if m.strip()]
