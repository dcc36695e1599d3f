"""The supervisor's 127.0.0.1 socket obeys only whoever can read the home's token file, and local pods start
from an explicit environment, not the Airflow process's (which holds connections and credentials)."""

from __future__ import annotations

import json
import socket
import stat
import textwrap
from pathlib import Path

import pytest

from mtc_provider.adapters.protocols import ApiError
from mtc_provider.local.runner import LocalJobSetApi, auth
from mtc_provider.local.runner.environment import workload_environment
from mtc_provider.local.runner.state import read_json, recv_line
from tests.runner.conftest import make_jobset, processes_mentioning, terminal, wait_for

NS = "default"


def exchange(port: int, envelope: dict) -> dict:
    """One raw exchange with the supervisor, as any local program could attempt it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        nonce = json.loads(recv_line(conn))["nonce"]
        conn.sendall(json.dumps(envelope(nonce) if callable(envelope) else envelope).encode() + b"\n")
        return json.loads(recv_line(conn))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_request_without_the_token_is_refused_and_runs_nothing(api: LocalJobSetApi, workload: Path):
    api.list(NS)
    assert api._call({"op": "ping"})  # the supervisor is up (the client signs with the token)
    port = read_json(api.home.supervisor_file)["port"]
    body = make_jobset("intruder", workload, ["steps=50"])
    request = {"op": "create", "namespace": NS, "body": body, "home": str(api.home.root)}

    unsigned = exchange(port, {"request": request, "nonce": "n"})
    forged = exchange(port, lambda nonce: {"request": request, "nonce": "n",
                                           "mac": auth.signature(b"guessed", "request", nonce, request)})
    replayed_mac = auth.signature(auth.read_token(api.home.root), "request", "an-old-nonce", request)
    replayed = exchange(port, {"request": request, "nonce": "n", "mac": replayed_mac})

    for reply in (unsigned, forged, replayed):
        assert reply["error"]["status"] == 401 and "supervisor.token" in reply["error"]["message"], reply
    assert not api.home.jobset_file(NS, "intruder").exists()
    assert api.list(NS) == []
    assert not processes_mentioning(str(workload)), "a refused request started a pod"


def test_the_home_and_its_token_are_private(api: LocalJobSetApi, workload: Path):
    api.create(NS, make_jobset("private", workload, ["steps=40"]))
    ramdisks = wait_for(lambda: [Path(p["ramdisk"]) for p in api.pods(NS, "private")
                                 if (Path(p["ramdisk"]) / "jax-init-info.txt").exists()])
    for ramdisk in ramdisks:  # tmpfs, like the MTC driver's volume: only the owner reads the checkpoints
        assert mode(ramdisk) == 0o700 and mode(ramdisk / "jax-init-info.txt") == 0o600, ramdisk
        assert mode(api.home.shm_root) == 0o700
    terminal(api, NS, "private")
    root = api.home.root
    assert mode(root / auth.TOKEN_FILE) == 0o600
    assert mode(root) == 0o700
    for folder in (api.home.state_dir, root / "logs", api.log_dir(NS, "private")):
        assert mode(folder) == 0o700, folder
    for path in [api.home.supervisor_file, api.home.supervisor_log, api.home.jobset_file(NS, "private"),
                 *api.log_dir(NS, "private").rglob("*.log")]:
        assert mode(path) & 0o077 == 0, (path, oct(mode(path)))


def test_the_client_does_not_trust_a_port_that_is_not_its_supervisor(api: LocalJobSetApi, monkeypatch):
    """A stale supervisor.json whose port another program now holds: its unsigned answer is not believed."""
    api.list(NS)
    assert api._call({"op": "ping"})
    impostor = socket.socket()
    impostor.bind(("127.0.0.1", 0))
    impostor.listen(1)
    info = read_json(api.home.supervisor_file)
    info["port"] = impostor.getsockname()[1]
    import threading

    def answer() -> None:
        conn, _ = impostor.accept()
        with conn:
            conn.sendall(b'{"nonce": "x"}\n')
            recv_line(conn)
            conn.sendall(b'{"response": {"ok": "anything"}, "mac": "00"}\n')

    threading.Thread(target=answer, daemon=True).start()
    monkeypatch.setattr("mtc_provider.local.runner.api.read_json",
                        lambda path: info if path == api.home.supervisor_file else read_json(path))
    monkeypatch.setattr("mtc_provider.local.runner.api.START_TIMEOUT", 1.0)
    monkeypatch.setattr(LocalJobSetApi, "_spawn", lambda self: None)
    with pytest.raises(ApiError) as caught:
        api._call({"op": "ping"})
    impostor.close()
    assert caught.value.status == 503 and "did not answer as" in str(caught.value)


def test_a_token_others_can_read_is_refused_by_the_client(tmp_path: Path):
    root = tmp_path / "home"
    root.mkdir()
    (root / auth.TOKEN_FILE).write_text("abc")
    (root / auth.TOKEN_FILE).chmod(0o644)
    with pytest.raises(ApiError) as caught:
        LocalJobSetApi(str(root))._call({"op": "ping"})
    assert caught.value.status == 403 and "mode 0600" in str(caught.value)


PRINT_ENV = textwrap.dedent(
    """
    import json, os
    print("env " + json.dumps(dict(os.environ)), flush=True)
    """
)


def test_a_secret_of_the_parent_does_not_reach_a_pod(home: str, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", "postgres://admin:s3cret@db/prod")
    monkeypatch.setenv("MY_API_TOKEN", "s3cret-token")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    script = tmp_path / "print_env.py"
    script.write_text(PRINT_ENV)
    api = LocalJobSetApi(home)  # spawns the supervisor from this (secret-holding) environment
    api.create(NS, make_jobset("env", script, slices=1 + 1, max_restarts=0))
    assert terminal(api, NS, "env")["status"]["terminalState"] == "Completed"
    logs = [p.read_text() for p in sorted(api.log_dir(NS, "env").rglob("*.log"))]
    envs = [json.loads(line[4:]) for text in logs for line in text.splitlines() if line.startswith("env ")]
    assert len(envs) == 2, logs
    for env in envs:
        assert "AIRFLOW_CONN_WAREHOUSE" not in env and "MY_API_TOKEN" not in env
        assert not any("s3cret" in value for value in env.values())
        assert env["MY_DIR"].endswith("/sub")  # declared by the JobSet
        assert env["JAX_PLATFORMS"] == "cpu" and env["JOBSET_NAME"] == "env"  # needed by the workload


def test_the_pod_environment_keeps_what_the_workload_needs_only():
    parent = {"PATH": "/usr/bin", "PYTHONPATH": "/src", "LC_ALL": "C.UTF-8", "XLA_FLAGS": "--x", "HOME": "/root",
              "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://u:p@h/db", "GOOGLE_APPLICATION_CREDENTIALS": "/k.json",
              "AWS_SECRET_ACCESS_KEY": "k"}
    env = workload_environment(parent)
    assert set(env) == {"PATH", "PYTHONPATH", "LC_ALL", "XLA_FLAGS", "HOME"}
    assert env["PATH"].endswith(":/usr/bin") and env["PYTHONPATH"] == "/src"
