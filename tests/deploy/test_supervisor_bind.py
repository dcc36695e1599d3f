"""The local cluster's API server listens where MTC_RUNNER_BIND_HOST says and tells clients where that is (the
kubeconfig names the advertised address, and its certificate covers it).

In docker-compose.yaml the supervisor binds 0.0.0.0 so the worker and triggerer containers, which share the
runner home on a volume, reach it by host name. Servers in tests bind loopback only: 127.0.0.2 stands in for
"an address other than the default", and shows the default 127.0.0.1 is not reachable there (and vice versa).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mtc_local.cluster.client import LocalCluster
from mtc_local.shared.state import Home, read_json
from mtc_local.supervisor import advertised_host, bind_host
from tests.support.local_cluster import FAKE_WORKLOAD, make_jobset


def _connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture
def supervised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Start the supervisor the way docker-compose.yaml's mtc-local service does; stop it by PID."""
    started: list[subprocess.Popen] = []

    def start(env: dict[str, str]) -> dict:
        home = tmp_path / "home"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("MTC_RUNNER")}
        proc = subprocess.Popen([sys.executable, "-m", "mtc_local.supervisor", str(home)],
                                env={**full_env, "MTC_RUNNER_IDLE_SECONDS": "30", **env}, start_new_session=True)
        started.append(proc)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            info = read_json(Home.of(home).supervisor_file)
            if info and info.get("pid") == proc.pid:
                return {**info, "home": str(home)}
            assert proc.poll() is None, "the supervisor exited"
            time.sleep(0.1)
        pytest.fail("the supervisor wrote no supervisor.json")

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(30)


def test_default_binds_loopback_only(supervised):
    info = supervised({})
    assert info["host"] == "127.0.0.1"
    assert _connects("127.0.0.1", info["api_port"])
    assert not _connects("127.0.0.2", info["api_port"])


def test_configured_bind_host_is_advertised_and_used_by_clients(supervised, tmp_path: Path):
    info = supervised({"MTC_RUNNER_BIND_HOST": "127.0.0.2"})
    assert info["host"] == "127.0.0.2"
    assert _connects("127.0.0.2", info["api_port"]) and not _connects("127.0.0.1", info["api_port"])
    # The client reads the advertised address from the shared home: a create goes through it.
    script = tmp_path / "fake_workload.py"
    script.write_text(FAKE_WORKLOAD)
    api = LocalCluster(info["home"])
    created = api.create("default", make_jobset("bound", script, args=["steps=2"]))
    assert created["metadata"]["name"] == "bound"
    assert json.loads(Home.of(info["home"]).supervisor_file.read_text())["pid"] == info["pid"]  # no second one
    api.delete("default", "bound", timeout=30)


def test_bind_and_advertised_host_rules(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("MTC_RUNNER_BIND_HOST", raising=False)
    monkeypatch.delenv("MTC_RUNNER_ADVERTISE_HOST", raising=False)
    assert bind_host() == "127.0.0.1"
    assert advertised_host("127.0.0.2") == "127.0.0.2"
    assert advertised_host("0.0.0.0") == socket.gethostname()  # what other containers resolve
    monkeypatch.setenv("MTC_RUNNER_ADVERTISE_HOST", "mtc-local")
    assert advertised_host("0.0.0.0") == "mtc-local"
