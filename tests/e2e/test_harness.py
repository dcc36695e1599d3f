"""The harness's own promise: whatever outlives a stop is found, killed by PID and reported (fast, no Airflow)."""

from __future__ import annotations

import subprocess
import sys

import psutil

from airflow_harness import AirflowServer

IGNORES_SIGINT = ("import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('ready', flush=True); "
                  "time.sleep(120)")
# Restores Python's SIGINT handler: a process started under a non-interactive background job (as in CI)
# inherits SIGINT ignored, like the Airflow components the harness starts with their handler restored.
STOPS_ON_SIGINT = ("import signal, time; signal.signal(signal.SIGINT, signal.default_int_handler); "
                   "print('ready', flush=True); time.sleep(120)")

# Like a scheduler whose LocalExecutor.end() waits on a wedged worker: the first SIGINT starts a wait that never
# ends, the second one exits (Airflow's "Signal again if you don't want to wait").
EXITS_ON_SECOND_SIGINT = ("import signal, sys, time\n"
                          "def first(*_):\n"
                          "    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))\n"
                          "    while True: time.sleep(1)\n"
                          "signal.signal(signal.SIGINT, first); print('ready', flush=True); time.sleep(120)")

# Like Airflow 3.3.2's scheduler whose LocalExecutor worker is wedged at its exit (apache/airflow#67870): the worker is
# a forked child titled as Airflow titles it, ignoring SIGINT; the scheduler joins it on the first SIGINT, and after
# the second one Python's atexit joins it again, so only the worker's end lets the scheduler exit.
SCHEDULER_WITH_WEDGED_WORKER = (
    "import multiprocessing, signal, sys, time, setproctitle\n"
    "def worker(started):\n"
    "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "    setproctitle.setproctitle('airflow worker -- LocalExecutor: <idle>')\n"
    "    started.set()\n"
    "    while True: time.sleep(1)\n"
    "if __name__ == '__main__':\n"
    "    context = multiprocessing.get_context('fork')\n"
    "    started = context.Event()\n"
    "    child = context.Process(target=worker, args=(started,))\n"
    "    child.start()\n"
    "    started.wait()\n"
    "    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))\n"
    "    try:\n"  # ready only inside: a SIGINT before the try would skip the join there
    "        print('ready', flush=True)\n"
    "        time.sleep(120)\n"
    "    finally:\n"
    "        child.join()\n")


def _server(tmp_path) -> AirflowServer:
    home = tmp_path / "airflow"
    home.mkdir()
    return AirflowServer(home=home, local_home=tmp_path / "local", port=0, env={},
                         stop_timeout=3.0, idle_grace=0.5, second_signal_timeout=3.0)


def _spawn(server: AirflowServer, code: str, **kwargs) -> subprocess.Popen:
    env = {"AIRFLOW_HOME": str(server.home), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True, **kwargs)
    assert proc.stdout.readline().strip() == "ready"  # its signal handling is in place
    return proc


def test_stop_leaves_nothing_and_reports_stragglers(tmp_path):
    server = _server(tmp_path)
    server.procs["polite"] = _spawn(server, STOPS_ON_SIGINT, start_new_session=True)
    server.procs["stubborn"] = _spawn(server, IGNORES_SIGINT, start_new_session=True)
    server.procs["waits"] = _spawn(server, EXITS_ON_SECOND_SIGINT, start_new_session=True)
    # Like the local runner's supervisor: detached, not a child of any component, found by its environment.
    detached = _spawn(server, IGNORES_SIGINT, start_new_session=True)
    try:
        killed = server.stop()
        assert {int(line.split()[0]) for line in killed} == {server.procs["stubborn"].pid, detached.pid}, killed
        assert detached.wait(timeout=10) is not None
        assert server.ours() == []
        assert server.procs["polite"].returncode is not None
        assert server.procs["waits"].returncode == 0, "a second SIGINT ends what the first one set waiting"
        assert [line.split()[1] for line in server.signalled_twice] == ["stubborn", "waits"]
    finally:
        for proc in (*server.procs.values(), detached):
            if psutil.pid_exists(proc.pid) and proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()


def test_the_session_airflow_carries_what_each_module_needs(tmp_path):
    """One Airflow serves the e2e session (conftest.airflow_server): both DAG folders as bundles, Airflow's
    LocalExecutor first (Airflow's default executor is the first listed: the training DAG and the preload test's
    control run on it, forked before the preload) and the evaluation DAG following test_ui.py's run."""
    import json

    from airflow_harness import PRELOAD_DAGS, UI_RUN_NAME, session_env

    env = session_env(tmp_path / "dags")
    bundles = json.loads(env["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"])
    assert [b["kwargs"]["path"] for b in bundles] == [str(tmp_path / "dags"), str(PRELOAD_DAGS)]
    assert len({b["name"] for b in bundles}) == 2 and (PRELOAD_DAGS / "preload_probe.py").is_file()
    assert env["AIRFLOW__CORE__EXECUTOR"].split(",") == [
        "LocalExecutor", "mtc_provider.executors.local.PreloadLocalExecutor"]
    assert env["MTC_EVAL_RUN_NAME"] == UI_RUN_NAME


def test_a_scheduler_held_by_a_wedged_executor_worker_exits_once_the_worker_is_killed(tmp_path):
    server = _server(tmp_path)
    server.procs["scheduler"] = _spawn(server, SCHEDULER_WITH_WEDGED_WORKER, start_new_session=True)
    worker = psutil.Process(server.procs["scheduler"].pid).children()[0]
    try:
        killed = server.stop()
        assert killed == [], "the scheduler exits by itself once its wedged worker is gone"
        assert server.procs["scheduler"].returncode == 0
        assert [line.split()[0] for line in server.wedged_workers] == [str(worker.pid)]
        assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
    finally:  # the worker too: it outlives a scheduler that exited without it (orphaned, ignoring SIGINT)
        proc = server.procs["scheduler"]
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        if worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE:
            worker.kill()
