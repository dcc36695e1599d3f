"""The local cluster's API server obeys only whoever can read the home's token (through its 0600 kubeconfig, over
TLS checked against the home's own CA), and local pods start from an explicit environment, not the Airflow
process's (which holds connections and credentials).

Authentication as https://kubernetes.io/docs/reference/access-authn-authz/authentication/ documents a bearer token:
a request without it, or with another, is 401 and does nothing.
"""

from __future__ import annotations

import json
import ssl
import stat
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from mtc_local.cluster.client import LocalCluster
from mtc_local.cluster.lifecycle import answers
from mtc_local.shared import auth
from mtc_local.runner.environment import workload_environment
from mtc_local.shared.state import read_json, write_json
from tests.doubles.kubernetes import KubernetesApiDouble
from tests.support.local_cluster import make_jobset, processes_mentioning, terminal, wait_for

NS = "default"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def raw_create(cluster: LocalCluster, body: dict, token: str | None) -> int:
    """One POST to the API server as any local program could attempt it (it may know the port, not the token)."""
    info = read_json(cluster.home.supervisor_file)
    request = urllib.request.Request(
        f"https://127.0.0.1:{info['api_port']}/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets",
        data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})})
    context = ssl.create_default_context(cafile=str(cluster.home.root / "pki" / "ca.crt"))
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as err:
        assert json.loads(err.read())["reason"] == "Unauthorized"
        return err.code


def test_a_request_without_the_token_is_refused_and_runs_nothing(api: LocalCluster, workload: Path):
    api.list(NS, "")  # the cluster is up
    body = make_jobset("intruder", workload, ["steps=50"])
    assert raw_create(api, body, None) == 401
    assert raw_create(api, body, "guessed") == 401
    assert not api.home.jobset_file(NS, "intruder").exists()
    assert api.list(NS, "") == []
    assert not processes_mentioning(str(workload)), "a refused request started a pod"


def test_the_home_its_token_kubeconfig_and_key_are_private(api: LocalCluster, workload: Path):
    api.create(NS, make_jobset("private", workload, ["steps=40"]))
    ramdisks = wait_for(lambda: [Path(p["ramdisk"]) for p in api.pods(NS, "private")
                                 if (Path(p["ramdisk"]) / "jax-init-info.txt").exists()])
    for ramdisk in ramdisks:  # tmpfs, like the MTC driver's volume: only the owner reads the checkpoints
        assert mode(ramdisk) == 0o700 and mode(ramdisk / "jax-init-info.txt") == 0o600, ramdisk
        assert mode(api.home.shm_root) == 0o700
    terminal(api, NS, "private")
    root = api.home.root
    for path in (root / auth.TOKEN_FILE, root / "kubeconfig", root / "pki" / "server.key"):
        assert mode(path) == 0o600, path
    assert mode(root) == 0o700
    for folder in (api.home.state_dir, root / "logs", api.log_dir(NS, "private"), root / "pki"):
        assert mode(folder) == 0o700, folder
    for path in [api.home.supervisor_file, api.home.supervisor_log, api.home.jobset_file(NS, "private"),
                 *api.log_dir(NS, "private").rglob("*.log")]:
        assert mode(path) & 0o077 == 0, (path, oct(mode(path)))


def test_a_port_that_is_not_this_homes_cluster_is_not_trusted(api: LocalCluster):
    """A stale supervisor.json whose port another program now holds: it is not taken for the cluster."""
    api.list(NS, "")
    assert answers(api.home)

    # Another server on the port: the Kubernetes API double answers /version too, but over plain HTTP and without
    # the home's CA or token.
    impostor = KubernetesApiDouble().start()
    real = read_json(api.home.supervisor_file)
    try:
        write_json(api.home.supervisor_file, {**real, "api_port": impostor.port})
        assert not answers(api.home, timeout=2)
    finally:
        write_json(api.home.supervisor_file, real)
        impostor.stop()


def test_a_token_others_can_read_is_refused(tmp_path: Path):
    root = tmp_path / "home"
    root.mkdir()
    (root / auth.TOKEN_FILE).write_text("abc")
    (root / auth.TOKEN_FILE).chmod(0o644)
    with pytest.raises(auth.TokenError) as caught:
        auth.read_token(root)
    assert "mode 0600" in str(caught.value)


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
    api = LocalCluster(home)  # its first call spawns the supervisor from this (secret-holding) environment
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
