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
"""

from __future__ import annotations

import multiprocessing

from airflow.executors.local_executor import LocalExecutor

from mtc_provider.preload import PRELOAD, preload


class PreloadLocalExecutor(LocalExecutor):
    """The LocalExecutor whose worker processes (and so every task process) start with `PRELOAD` imported."""

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
        super().start()


def _configured_forkserver_preload() -> list[str]:
    """What Airflow's own `mp_forkserver_preload` set (airflow.utils.process_utils.set_component_mp_start_method:
    the `[scheduler]` value, else `[core]`), so adding ours keeps it."""
    from airflow.configuration import conf

    raw = (conf.get("scheduler", "mp_forkserver_preload", fallback=None)
           or conf.get("core", "mp_forkserver_preload", fallback=None) or "")
    return [m.strip() for m in raw.split(",") if m.strip()]
