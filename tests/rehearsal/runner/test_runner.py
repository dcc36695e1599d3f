"""The local runner with real processes and real signals (a fake workload, no JAX), reached as GKE is: through
the Kubernetes JobSet adapter and the cncf.kubernetes hooks, on the local cluster's API server."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mtc_provider.adapters.kubernetes import AsyncKubernetesJobSetApi
from mtc_provider.adapters.protocols import AlreadyExists, ApiError, NotFound
from mtc_provider.core.attempt.status import evaluate_jobset
from mtc_local.cluster.client import LocalCluster, async_client_factory
from mtc_local.shared.state import Home
from tests.support.local_cluster import make_jobset, terminal, wait_for

NS = "default"


def _log(api: LocalCluster, name: str, restart: int, slice_index: int, host: int = 0) -> str:
    return (api.log_dir(NS, name) / str(restart) / f"s{slice_index}-h{host}.log").read_text()


def _steps(text: str) -> list[int]:
    return [int(line.split(":")[1].split(",")[0]) for line in text.splitlines() if line.startswith("completed step")]


def _condition(obj: dict) -> dict:
    [cond] = obj["status"]["conditions"]
    return cond


def test_create_runs_every_host_to_completed(api, workload):
    created = api.create(NS, make_jobset("ok", workload, slices=2, hosts=2, labels={"app": "x"}))
    assert created["metadata"]["uid"] and created["metadata"]["creationTimestamp"]
    done = terminal(api, NS, "ok")
    cond = _condition(done)
    assert (cond["type"], cond["status"], cond["reason"]) == ("Completed", "True", "AllJobsCompleted")
    assert done["status"]["terminalState"] == "Completed" and done["status"]["restarts"] == 0
    assert done["status"]["replicatedJobsStatus"] == [
        {"name": "slice", "ready": 0, "succeeded": 2, "failed": 0, "active": 0, "suspended": 0}]
    assert int(done["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert done["metadata"]["annotations"]["mtc.local/log-dir"] == str(api.log_dir(NS, "ok"))
    home = Home.of(api.home.root)
    coordinators = set()
    for s in range(2):
        for h in range(2):
            env = json.loads(_log(api, "ok", 0, s, h).splitlines()[0][4:])
            ramdisk = home.ramdisk_dir(NS, "ok", s, h)
            assert env["dir"] == str(ramdisk) and env["MY_DIR"] == f"{ramdisk}/sub"  # /local rewritten
            assert (env["JOB_INDEX"], env["JOB_COMPLETION_INDEX"], env["MTC_PROCESS_ID"]) == (str(s), str(h), str(2 * s + h))
            assert (env["MTC_NUM_SLICES"], env["MTC_HOSTS_PER_SLICE"], env["JOBSET_NAME"]) == ("2", "2", "ok")
            assert (ramdisk / "jax-init-info.txt").read_text().splitlines()[0] == str(2 * s + h)
            coordinators.add(env["coordinator"])
    assert len(coordinators) == 1 and coordinators.pop().startswith("127.0.0.1:")
    assert [o["metadata"]["name"] for o in api.list(NS, "app=x")] == ["ok"] and api.list(NS, "app=y") == []


def test_retryable_exit_restarts_all_hosts_then_completes(api, workload):
    api.create(NS, make_jobset("retry", workload, args=["steps=6", "fail_at=3", "fail_pid=1", "fail_once=1"]))
    done = terminal(api, NS, "retry")
    assert _condition(done)["reason"] == "AllJobsCompleted"
    assert (done["status"]["restarts"], done["status"]["restartsCountTowardsMax"]) == (1, 1)
    # Both slices were recreated; each resumed from the step kept in its ramdisk (the ramdisk survives restarts).
    for s in range(2):
        first, second = _steps(_log(api, "retry", 0, s)), _steps(_log(api, "retry", 1, s))
        assert second and second[0] == first[-1] + 1 and second[-1] == 6


def test_bug_exit_code_fails_the_jobset_without_restart(api, workload):
    api.create(NS, make_jobset("bug", workload, args=["steps=50", "fail_at=2", "fail_pid=0", "fail_code=3"]))
    done = terminal(api, NS, "bug")
    cond = _condition(done)
    assert (cond["type"], cond["reason"]) == ("Failed", "FailJobSetFailurePolicyAction")
    assert "first failed job: bug-slice-0" in cond["message"]
    assert done["status"]["restarts"] == 0 and not (api.log_dir(NS, "bug") / "1").exists()
    state = evaluate_jobset(done)  # the core's one evaluator reads the local status as it reads GKE's
    assert (state.phase, state.retryable, state.failed_job) == ("failed", False, "bug-slice-0")
    wait_for(lambda: not any(p["exitCode"] is None for p in api.pods(NS, "bug")))  # the other slice is stopped


def test_max_restarts_exhausted_fails(api, workload):
    api.create(NS, make_jobset("max", workload, max_restarts=2, args=["steps=9", "fail_at=1", "fail_pid=0"]))
    done = terminal(api, NS, "max")
    assert _condition(done)["reason"] == "ReachedMaxRestarts"
    assert done["status"]["restarts"] == 2
    assert done["status"]["replicatedJobsStatus"][0]["failed"] == 1
    state = evaluate_jobset(done)
    assert (state.phase, state.retryable, state.restarts) == ("failed", True, 2)


def test_sigkill_fault_at_step_restarts_and_is_recorded_once(api, workload):
    plan = [{"kind": "sigkill_host", "at_step": 3, "slice": 1, "host": 0}]
    api.create(NS, make_jobset("kill", workload, args=["steps=8", "sleep=0.1"], fault_plan=plan))
    done = terminal(api, NS, "kill")
    assert _condition(done)["reason"] == "AllJobsCompleted" and done["status"]["restarts"] == 1
    [fault] = api.faults(NS, "kill")
    assert (fault["kind"], fault["slice"], fault["host"]) == ("sigkill_host", 1, 0)
    assert fault["step"] >= 3 and fault["ts"] > 0 and len(fault["pids"]) == 1
    assert not psutil.pid_exists(fault["pids"][0]) or psutil.Process(fault["pids"][0]).status() == "zombie"


def test_sigterm_slice_fault_is_a_preemption(api, workload):
    plan = [{"kind": "sigterm_slice", "at_step": 2, "slice": 0}]
    api.create(NS, make_jobset("pre", workload, args=["steps=6", "sleep=0.1"], fault_plan=plan))
    done = terminal(api, NS, "pre")
    # The workload saves and exits 0 on SIGTERM, as MaxText does: the JobSet ends Completed, below its target.
    assert _condition(done)["reason"] == "AllJobsCompleted" and done["status"]["restarts"] == 0
    assert "preempted" in _log(api, "pre", 0, 0) and _steps(_log(api, "pre", 0, 0))[-1] < 6
    assert _steps(_log(api, "pre", 0, 1))[-1] == 6


def test_delete_sigterm_waits_the_grace_period_then_sigkills(api, workload, tmp_path):
    api.create(NS, make_jobset("grace", workload, grace=2, args=["steps=1000", "term=ignore"]))
    wait_for(lambda: _steps(_log(api, "grace", 0, 1)))
    pids = [p["pid"] for p in api.pods(NS, "grace")]
    started = time.monotonic()
    api.delete(NS, "grace")  # foreground: the JobSet stays until its pods are gone
    api.wait_deleted(NS, "grace")
    elapsed = time.monotonic() - started
    assert 1.9 <= elapsed < 6, elapsed
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    assert not (Home.of(api.home.root).shm_root / NS / "grace").exists()
    with pytest.raises(NotFound):
        api.get(NS, "grace")
    api.delete(NS, "grace")  # missing is not an error
    assert (api.log_dir(NS, "grace") / "0" / "s0-h0.log").exists()  # logs outlive the JobSet


def test_wipe_ramdisk_removes_the_hosts_files(api, workload):
    plan = [{"kind": "wipe_ramdisk", "at_step": 3, "slice": 0, "host": 0}]
    api.create(NS, make_jobset("wipe", workload, args=["steps=7", "sleep=0.1"], fault_plan=plan))
    done = terminal(api, NS, "wipe")
    assert done["status"]["restarts"] == 1
    # The wiped host starts over from step 1; the other host resumes from its ramdisk.
    assert _steps(_log(api, "wipe", 1, 0))[0] == 1
    assert _steps(_log(api, "wipe", 1, 1))[0] > 1
    [fault] = api.faults(NS, "wipe")
    assert fault["kind"] == "wipe_ramdisk"


def test_hang_stops_progress_of_the_slice(api, workload):
    plan = [{"kind": "hang", "at_seconds": 0.5, "slice": 0}]
    api.create(NS, make_jobset("hang", workload, args=["steps=1000", "sleep=0.05"], fault_plan=plan))
    wait_for(lambda: api.faults(NS, "hang"))
    time.sleep(0.3)
    hung, alive = _steps(_log(api, "hang", 0, 0)), _steps(_log(api, "hang", 0, 1))
    time.sleep(1.0)
    assert _steps(_log(api, "hang", 0, 0))[-1] == hung[-1]
    assert _steps(_log(api, "hang", 0, 1))[-1] > alive[-1]
    assert api.get(NS, "hang")["status"].get("terminalState") is None
    pids = [p["pid"] for p in api.pods(NS, "hang")]
    api.delete(NS, "hang")  # a stopped process is continued so it sees SIGTERM, then killed
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]


def test_duplicate_create_is_already_exists(api, workload):
    api.create(NS, make_jobset("dup", workload, args=["steps=100"]))
    with pytest.raises(AlreadyExists) as err:
        api.create(NS, make_jobset("dup", workload))
    assert err.value.status == 409
    api.delete(NS, "dup")
    api.wait_deleted(NS, "dup")


def test_bad_input_is_422_naming_the_field_before_any_side_effect(api, workload):
    body = make_jobset("bad", workload, fault_plan=[{"kind": "meteor", "at_step": 1}])
    with pytest.raises(ApiError) as err:
        api.create(NS, body)
    assert err.value.status == 422
    assert 'metadata.annotations["mtc.local/fault-plan"][0].kind' in str(err.value)
    assert not api.home.jobset_file(NS, "bad").exists() and not api.log_dir(NS, "bad").exists()  # nothing ran


def test_jobset_outlives_its_creator_and_is_seen_from_another_process(home, workload):
    body = make_jobset("other", workload, args=["steps=1000", "sleep=0.1"], labels={"run": "r1"})
    script = (
        "import json, sys\n"
        "from mtc_local.cluster.client import LocalCluster\n"
        "api = LocalCluster(sys.argv[1])\n"
        "if sys.argv[2] == 'create':\n"
        "    print(api.create('default', json.loads(sys.argv[3]))['metadata']['uid'])\n"
        "else:\n"
        "    print(json.dumps([o['metadata']['uid'] for o in api.list('default', 'run=r1')]))\n"
    )
    created = subprocess.run([sys.executable, "-c", script, home, "create", json.dumps(body)],
                             check=True, capture_output=True, text=True, timeout=90)
    uid = created.stdout.strip().splitlines()[-1]  # after anything Airflow logs when the hook loads
    listed = subprocess.run([sys.executable, "-c", script, home, "list"],
                            check=True, capture_output=True, text=True, timeout=90)
    assert json.loads(listed.stdout.strip().splitlines()[-1]) == [uid], listed.stdout
    api = LocalCluster(home)
    assert api.get(NS, "other")["status"].get("terminalState") is None  # its creator has exited: still running
    with pytest.raises(AlreadyExists):
        api.create(NS, body)
    assert api.get(NS, "other")["metadata"]["uid"] == uid
    api.delete(NS, "other")
    api.wait_deleted(NS, "other")


def test_supervisor_exits_when_idle(home, workload, monkeypatch):
    from mtc_local.cluster.lifecycle import STAY_FILE

    monkeypatch.setenv("MTC_RUNNER_IDLE_SECONDS", "0.5")
    stay = Path(home) / STAY_FILE
    # The stay file (what `mtc local up` writes) holds the supervisor while a request is on its way: with 0.5 s of
    # idleness and a loaded machine, a fresh supervisor could otherwise leave before the create reaches it (seen in
    # CI: the connection closed under the POST). Idleness is measured from the file's removal.
    Path(home).mkdir(parents=True, exist_ok=True)
    stay.touch()
    api = LocalCluster(home)
    api.create(NS, make_jobset("idle", workload, args=["steps=2"]))
    pid = json.loads(Home.of(home).supervisor_file.read_text())["pid"]
    terminal(api, NS, "idle")
    stay.unlink()
    # Idle for 0.5 s, then it exits; the bound is generous because on a loaded 2-core machine its loop and exit
    # can take seconds (seen failing at 10 s with a load of 14).
    wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie", timeout=60)
    # The next client starts the cluster again: the finished JobSet is still there, and can be deleted.
    stay.touch()
    assert api.get(NS, "idle")["status"]["terminalState"] == "Completed"
    assert json.loads(Home.of(home).supervisor_file.read_text())["pid"] != pid
    api.delete(NS, "idle")
    api.wait_deleted(NS, "idle")
    with pytest.raises(NotFound):
        api.get(NS, "idle")


def test_a_create_while_the_supervisor_exits_for_idleness_is_refused_before_any_side_effect(tmp_path, workload):
    """Its loop found it idle (under the lock) and it is exiting: a JobSet created then would run pods nobody owns
    until the next supervisor kills and restarts them (recover). 503, which the client retries: by then the next
    request has started a new supervisor."""
    from mtc_local.cluster import errors
    from mtc_local.supervisor import Supervisor, new_store

    where = Home.of(tmp_path / "closing")
    where.root.mkdir()
    supervisor = Supervisor(where, new_store(where))
    supervisor.closing = True
    try:
        with pytest.raises(errors.StatusError) as refused:
            supervisor.create_jobset(NS, make_jobset("late", workload))
        assert refused.value.code == 503 and refused.value.reason == "ServiceUnavailable"
        assert not supervisor.busy and not where.jobset_file(NS, "late").exists()
    finally:
        supervisor.kill_everything()


async def test_async_watch_yields_added_then_modified_until_terminal(home, workload):
    api = AsyncKubernetesJobSetApi(async_client_factory(home), poll_interval=0.05)
    LocalCluster(home).create(NS, make_jobset("watch", workload, args=["steps=4", "fail_at=2", "fail_pid=1",
                                                                         "fail_once=1"]))
    events, versions = [], []
    async for event in api.watch(NS, "watch"):
        events.append(event.type)
        versions.append(int(event.obj["metadata"]["resourceVersion"]))
        if event.obj["status"].get("terminalState"):
            break
    assert events[0] == "ADDED" and set(events[1:]) == {"MODIFIED"}
    assert versions == sorted(set(versions))
    assert event.obj["status"]["restarts"] == 1
    await api.delete(NS, "watch")
    with pytest.raises(NotFound):
        await api.get(NS, "watch")


def test_a_resubmitted_jobset_of_the_same_run_does_not_fire_the_run_faults_again(api, workload):
    """A fault plan belongs to a training run: the next attempt (a new JobSet, same run-name label) skips it."""
    from mtc_provider.core.basics.labels import RUN_NAME

    plan = [{"kind": "sigkill_host", "at_step": 2, "slice": 0, "host": 0}]
    labels = {RUN_NAME: "run-a"}
    api.create(NS, make_jobset("att-1", workload, args=["steps=5", "sleep=0.1"], fault_plan=plan, labels=labels))
    first = terminal(api, NS, "att-1")
    assert first["status"]["restarts"] == 1 and len(api.faults(NS, "att-1")) == 1
    api.create(NS, make_jobset("att-2", workload, args=["steps=5", "sleep=0.1"], fault_plan=plan, labels=labels))
    second = terminal(api, NS, "att-2")
    assert second["status"]["restarts"] == 0 and api.faults(NS, "att-2") == []
    assert [record["jobset"] for record in api.run_faults(NS, "run-a")] == ["att-1"]
    api.delete(NS, "att-1")
    api.delete(NS, "att-2")
