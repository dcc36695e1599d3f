"""`mtc local up` / `mtc local down`: the local cluster starts in the background, stays up when idle, answers the
machine's kubectl through the printed kubeconfig, and stops by its PID."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from mtc_local.cluster.lifecycle import answers, supervisor_pid
from mtc_local.shared.state import Home
from tests.rehearsal.cluster.test_cluster_apiserver import kubectl


def mtc(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtc_provider.cli", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def _gcs_home(endpoint: str, home: str) -> str | None:
    """The home the local GCS at `endpoint` serves (asked with that home's token, once it proved to hold it), or
    None when nothing answers there as that home's server."""
    import json
    import urllib.request

    from mtc_local.token import require_token, serves_home

    try:
        if not serves_home(endpoint, home):
            return None
        request = urllib.request.Request(f"{endpoint}/_mtc/health",
                                         headers={"Authorization": f"Bearer {require_token(home)}"})
        with urllib.request.urlopen(request, timeout=2) as response:
            return json.loads(response.read())["home"]
    except OSError:
        return None


def test_local_up_stays_up_for_kubectl_and_down_stops_it(home):
    up = mtc("local", "up", "--home", home, env={"MTC_RUNNER_IDLE_SECONDS": "0.5"})
    assert up.returncode == 0, up.stderr
    kubeconfig = up.stdout.split("kubeconfig: ", 1)[1].split()[0]
    assert kubeconfig == str(Home.of(home).root / "kubeconfig")
    pid = supervisor_pid(Home.of(home))
    time.sleep(2)  # longer than the idle timeout: `up` means up until `down`
    assert supervisor_pid(Home.of(home)) == pid and answers(Home.of(home))
    assert "default" in kubectl(kubeconfig, "get", "namespaces")
    assert "No resources found" in subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", "jobsets,pods"],
                                                  capture_output=True, text=True).stderr
    endpoint = up.stdout.split("local GCS endpoint", 1)[1].splitlines()[1].strip()  # the line after the label
    assert _gcs_home(endpoint, home) == str(Home.of(home).root)  # it serves this home's bucket folders, idle or not
    again = mtc("local", "up", "--home", home)  # idempotent: the same cluster and the same GCS
    assert again.returncode == 0 and supervisor_pid(Home.of(home)) == pid and endpoint in again.stdout
    down = mtc("local", "down", "--home", home)
    assert down.returncode == 0 and "stopped the local cluster" in down.stdout and "stopped" in down.stdout
    assert _gcs_home(endpoint, home) is None
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert "no local cluster runs" in mtc("local", "down", "--home", home).stdout
