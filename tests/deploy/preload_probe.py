"""A probe that runs inside a real LocalExecutor worker process (tests/deploy/test_preload.py).

The executor hands workloads to its workers over a multiprocessing queue (pickled); the worker unpickles each in
`input.get()` (airflow/executors/local_executor.py, `_run_worker`). Unpickling a `Probe` calls `report` there, in
the worker: it forks a child as Airflow's supervisor forks a task process (`os.fork()`,
airflow/sdk/execution_time/supervisor.py `WatchedSubprocess.start`), and the child writes which of the preload's
modules it has without importing anything. `report` returns None: the worker's poison pill, so it exits.
"""

from __future__ import annotations

import json
import os
import sys


class Probe:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return report, (self.path,)


def report(path: str) -> None:
    from mtc_provider.preload import PRELOAD  # light: the names only

    pid = os.fork()
    if pid == 0:
        try:
            loaded = [name for name in PRELOAD if name in sys.modules]
            with open(path + ".tmp", "w", encoding="utf-8") as out:
                json.dump({"pid": os.getpid(), "worker": os.getppid(), "loaded": loaded}, out)
            os.replace(path + ".tmp", path)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return None
