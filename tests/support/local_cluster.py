"""Fixtures for the local runner tests: a runner home whose supervisor and pods are stopped afterwards,
a tiny fake workload (no JAX) and a JobSet builder shaped like the rendered GKE manifest."""

from __future__ import annotations

import json
import os
import shutil
import signal
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

import psutil
import pytest

from mtc_local.cluster.client import LocalCluster
from mtc_local.runner.manifest import FAULT_PLAN_ANNOTATION
from mtc_local.shared.state import Home, read_json

# Prints `completed step: N`, keeps its step in the ramdisk (so a restart resumes), fails on request.
FAKE_WORKLOAD = textwrap.dedent(
    """
    import json, os, signal, sys, time
    a = dict(x.split("=", 1) for x in sys.argv[1:])
    d = a["dir"]
    with open(os.path.join(d, "jax-init-info.txt")) as f:
        pid = int(f.readline())
        coordinator = f.readline().strip()
    names = ["JOBSET_NAME", "REPLICATED_JOB_NAME", "REPLICATED_JOB_REPLICAS", "JOB_INDEX", "JOB_COMPLETION_INDEX",
             "MTC_NUM_SLICES", "MTC_HOSTS_PER_SLICE", "MTC_PROCESS_ID", "MTC_COORDINATOR_ADDRESS", "MY_DIR"]
    print("env " + json.dumps({n: os.environ.get(n) for n in names} | {"dir": d, "coordinator": coordinator}), flush=True)
    if a.get("term") == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: (print("preempted", flush=True), sys.exit(0)))
    marker = os.path.join(d, "step")
    start = int(open(marker).read()) if os.path.exists(marker) else 0
    attempt = os.environ.get("JOBSET_RESTART_ATTEMPT")
    fail_at, fail_pid = int(a.get("fail_at", -1)), int(a.get("fail_pid", 0))
    if a.get("fail_once") != "1" and pid == fail_pid and 0 <= fail_at <= start:
        sys.exit(int(a.get("fail_code", 42)))  # resumed past the failing step: fail again at once
    for step in range(start + 1, int(a.get("steps", 5)) + 1):
        time.sleep(float(a.get("sleep", 0.05)))
        with open(marker + ".tmp", "w") as f:
            f.write(str(step))
        os.replace(marker + ".tmp", marker)
        print(f"completed step: {step}, process {pid}", flush=True)
        if step == fail_at and pid == fail_pid:
            if a.get("fail_once") != "1" or attempt == "0":
                sys.exit(int(a.get("fail_code", 42)))
    sys.exit(0)
    """
)

# The exit-code policy of the rendered TPU manifests: 42 and signals (127..255) are retryable, the rest is a bug.
RETRYABLE = [42, *range(127, 256)]


@pytest.fixture
def workload(tmp_path: Path) -> Path:
    path = tmp_path / "fake_workload.py"
    path.write_text(FAKE_WORKLOAD)
    return path


def make_jobset(
    name: str,
    script: Path,
    args: list[str] = (),
    slices: int = 2,
    hosts: int = 1,
    max_restarts: int | None = 3,
    grace: float = 1,
    fault_plan: Any = None,
    labels: dict[str, str] | None = None,
    fail_jobset_rule: bool = True,
) -> dict[str, Any]:
    annotations = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
    if fault_plan is not None:
        annotations[FAULT_PLAN_ANNOTATION] = json.dumps(fault_plan)
    spec: dict[str, Any] = {
        "replicatedJobs": [
            {
                "name": "slice",
                "replicas": slices,
                "template": {
                    "spec": {
                        "parallelism": hosts,
                        "completions": hosts,
                        "backoffLimit": 0,
                        "completionMode": "Indexed",
                        "podFailurePolicy": {
                            "rules": [
                                {
                                    "action": "FailJob",
                                    "onPodConditions": [],
                                    "onExitCodes": {"containerName": "jax-tpu", "operator": "NotIn",
                                                    "values": RETRYABLE},
                                }
                            ]
                        },
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "terminationGracePeriodSeconds": grace,
                                "containers": [
                                    {
                                        "name": "jax-tpu",
                                        "image": "ignored:latest",
                                        "command": ["python3", str(script)],
                                        "args": ["dir=/local", *args],
                                        "env": [{"name": "MY_DIR", "value": "/local/sub"}],
                                        "volumeMounts": [{"name": "cache", "mountPath": "/local"}],
                                    }
                                ],
                                "volumes": [
                                    {"name": "cache", "csi": {"driver": "multitier-checkpoint.csi.storage.gke.io"}}
                                ],
                            }
                        },
                    }
                },
            }
        ]
    }
    if max_restarts is not None:
        spec["failurePolicy"] = {"maxRestarts": max_restarts}
        if fail_jobset_rule:
            spec["failurePolicy"]["rules"] = [
                {"name": "bug", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}
            ]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations},
        "spec": spec,
    }


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def terminal(api: LocalCluster, namespace: str, name: str, timeout: float = 20.0) -> dict[str, Any]:
    return wait_for(lambda: (o := api.get(namespace, name))["status"].get("terminalState") and o, timeout)


def processes_mentioning(text: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and any(text in part for part in proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            pass
    return found


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A runner home; afterwards its supervisor (by pid) and its local GCS are stopped, and nothing of it may
    remain."""
    from mtc_local.gcs import stop as stop_gcs

    monkeypatch.setenv("MTC_RUNNER_IDLE_SECONDS", "30")
    root = tmp_path / "home"
    yield str(root)
    if root.exists():
        stop_gcs(root)
    info = read_json(Home.of(root).supervisor_file)
    if info:
        try:
            os.kill(info["pid"], signal.SIGTERM)
            psutil.Process(info["pid"]).wait(10)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    deadline = time.monotonic() + 10
    while processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    leftovers = processes_mentioning(str(tmp_path))
    for proc in leftovers:
        proc.kill()
    shutil.rmtree(Home.of(root).shm_root, ignore_errors=True)
    assert not leftovers, f"processes left running: {leftovers}"


@pytest.fixture
def api(home: str) -> LocalCluster:
    """The JobSet adapter GKE uses (KubernetesJobSetApi), on the home's local cluster, with its local records."""
    return LocalCluster(home)


@pytest.fixture
def kubeconfig(home: str) -> Path:
    """The home's local cluster, started: its kubeconfig (for kubectl and the kubernetes client)."""
    from mtc_local.cluster.lifecycle import ensure_running

    return ensure_running(home)


@pytest.fixture
def api_client(kubeconfig: Path):
    """The real kubernetes client on the home's local cluster."""
    from kubernetes import config

    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    yield api_client
    api_client.close()
