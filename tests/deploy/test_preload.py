"""The launch tries' first-use imports made once, before the task processes are forked (mtc_provider.preload).

For the LocalExecutor (`[core] executor = mtc_provider.executors.local.PreloadLocalExecutor`): a real executor in a
fresh interpreter starts its real worker processes; a probe unpickled inside a worker forks a child as Airflow's
supervisor forks a task process and reports which of `PRELOAD` it already has (tests/deploy/preload_probe.py).
Airflow's own LocalExecutor is the control: the same probe finds none of them. The end-to-end effect, under a real
scheduler, is `python -m benchmarks.resubmission_e2e --preload N` (docs/benchmarks.md, section 2) and
tests/e2e/test_preload_executor.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mtc_provider.preload import PRELOAD, preload

HERE = Path(__file__).resolve().parent
RUN = r'''
import json, multiprocessing, sys, time
method, executor_path, out = sys.argv[1:4]
multiprocessing.set_start_method(method, force=True)
from mtc_provider.preload import PRELOAD
import importlib
module_name, _, class_name = executor_path.rpartition(".")
executor = getattr(importlib.import_module(module_name), class_name)(parallelism=1)
before = [m for m in PRELOAD if m in sys.modules]
executor.start()
from preload_probe import Probe
executor.activity_queue.put(Probe(out))
if not executor.is_mp_using_fork:  # forkserver/spawn: the executor starts a worker when one is asked for
    with executor._unread_messages:
        executor._unread_messages.value += 1
    executor._check_workers()
deadline = time.monotonic() + 120
while time.monotonic() < deadline and not __import__("os").path.exists(out):
    time.sleep(0.05)
executor.end()
print(json.dumps({"scheduler_before_start": before, "workers": sorted(executor.workers)}))
'''


def _probe(tmp_path: Path, method: str, executor: str) -> tuple[dict, dict]:
    out = tmp_path / f"probe-{method}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path / "airflow"), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", RUN, method, executor, str(out)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert out.exists(), f"the probe never ran in a worker:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1]), json.loads(out.read_text())


@pytest.mark.parametrize("method", ["fork", pytest.param("forkserver", marks=pytest.mark.slow)])
def test_the_preload_executors_task_processes_start_with_the_modules(tmp_path, method):
    scheduler, child = _probe(tmp_path, method, "mtc_provider.executors.local.PreloadLocalExecutor")
    assert scheduler["scheduler_before_start"] == []  # so what the child has came from the executor's start
    assert child["loaded"] == list(PRELOAD)
    assert child["worker"] != child["pid"]


def test_airflows_own_local_executor_leaves_them_to_each_try(tmp_path):
    """The control: the probe itself brings none of them in."""
    scheduler, child = _probe(tmp_path, "fork", "airflow.executors.local_executor.LocalExecutor")
    assert scheduler["scheduler_before_start"] == [] and child["loaded"] == []


def test_preload_names_what_it_cannot_import():
    with pytest.raises(ModuleNotFoundError, match="mtc_provider.no_such_module"):
        preload(("json", "mtc_provider.no_such_module"))
