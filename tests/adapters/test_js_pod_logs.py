"""Pod logs through the real kubernetes client, against the Kubernetes API double and against the local cluster.

The double (tests/doubles/kubernetes.py) answers as the Kubernetes API documents (API reference, Pod v1 "read
log"): `tailLines` keeps the last N lines, `limitBytes` stops after N bytes, `sinceSeconds` keeps lines newer than
now - N, `timestamps=true` prefixes each line with its RFC 3339 time and a space; pods are listed by `labelSelector`.
"""

from __future__ import annotations

import logging
import time

import pytest

from tests.doubles.kubernetes import KubernetesApiDouble
from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore
from mtc_provider.adapters.kubernetes import KubernetesJobSetApi
from mtc_provider.adapters.pod_logs import (
    KubernetesPodLogs,
    LeaderLogFollower,
    failed_pod_tails,
    log_failed_pod_tails,
    pod_logs_for,
)


def add_pod(core: KubernetesApiDouble, name: str, job_index: int, host: int, phase: str = "Running",
            exit_code: int | None = None, reason: str = "", jobset: str = "train") -> None:
    """A pod of a JobSet's job as the JobSet controller labels it, with its container's state."""
    state = {"terminated": {"exitCode": exit_code, "reason": reason}} if exit_code is not None else {"running": {}}
    core.pods.append({
        "metadata": {"name": name, "namespace": "default", "labels": {
            "jobset.sigs.k8s.io/jobset-name": jobset, "jobset.sigs.k8s.io/job-index": str(job_index),
            "batch.kubernetes.io/job-completion-index": str(host)}},
        "status": {"phase": phase, "containerStatuses": [{"name": "jax-tpu", "ready": False, "restartCount": 0,
                                                          "image": "i", "imageID": "", "state": state}]},
    })


@pytest.fixture
def core():
    double = KubernetesApiDouble().start()
    yield double
    double.stop()


def factory(double: KubernetesApiDouble):
    from kubernetes import client

    return lambda: client.ApiClient(client.Configuration(host=double.url))


def test_failed_pods_tails_leader_first(core) -> None:
    add_pod(core, "train-slice-0-0-aaaaa", 0, 0, "Failed", 1, "Error")
    add_pod(core, "train-slice-0-1-bbbbb", 0, 1, "Running")
    add_pod(core, "train-slice-1-0-ccccc", 1, 0, "Failed", 137, "OOMKilled")
    add_pod(core, "other-slice-0-0-ddddd", 0, 0, "Failed", 1, "Error", jobset="other")
    core.write_log("train-slice-0-0-aaaaa", *[f"step {i}" for i in range(200)], "ValueError: bad config")
    core.write_log("train-slice-1-0-ccccc", "loading", "Killed")
    logs = KubernetesPodLogs(factory(core), container="jax-tpu")
    lines = failed_pod_tails(logs, "default", "train", lines=3)
    assert lines == [
        "----- failed pod train-slice-0-0-aaaaa (exit 1, Error): last 3 log lines -----",
        "step 198", "step 199", "ValueError: bad config",
        "----- end of train-slice-0-0-aaaaa -----",
        "----- failed pod train-slice-1-0-ccccc (exit 137, OOMKilled): last 2 log lines -----",
        "loading", "Killed",
        "----- end of train-slice-1-0-ccccc -----",
    ]
    # Bounded on the server: the tail and the byte limit travel in the request.
    log_request = next(r for r in core.requests if r.path.endswith("/log"))
    assert (log_request.query["tailLines"], log_request.query["container"]) == ("3", "jax-tpu")
    assert "limitBytes" in log_request.query


def test_leader_log_is_followed_without_repeating_lines(core) -> None:
    add_pod(core, "train-slice-0-1-bbbbb", 0, 1)
    add_pod(core, "train-slice-0-0-aaaaa", 0, 0)
    now = time.time()
    core.write_log("train-slice-0-0-aaaaa", "start", "step 1", at=now - 1)
    core.write_log("train-slice-0-1-bbbbb", "not the leader", at=now - 1)
    follower = LeaderLogFollower(KubernetesPodLogs(factory(core)), "default", "train", max_lines=10)
    assert follower.poll() == ["start", "step 1"]
    assert follower.poll() == []
    core.write_log("train-slice-0-0-aaaaa", "step 2", "step 3", at=time.time() + 0.01)
    assert follower.poll() == ["step 2", "step 3"]
    assert follower.pod == "train-slice-0-0-aaaaa"
    assert any("sinceSeconds" in r.query for r in core.requests)


def test_reading_logs_never_fails_the_task(core, caplog) -> None:
    core.stop()  # the server is gone: connection refused
    api = KubernetesJobSetApi(factory(core))
    with caplog.at_level(logging.INFO):
        assert log_failed_pod_tails(logging.getLogger("t"), api, "default", "train") == []
    assert "could not read the failed pods' logs" in caplog.text


def test_pod_logs_for_picks_the_reader_of_the_api(tmp_path) -> None:
    assert isinstance(pod_logs_for(KubernetesJobSetApi(lambda: None)), KubernetesPodLogs)
    from mtc_provider import targets

    local = targets.jobset_api({"kind": "local", "home": str(tmp_path)})  # the same class as GKE
    assert isinstance(pod_logs_for(local), KubernetesPodLogs)
    assert pod_logs_for(object()) is None


def test_the_hook_reads_failed_pods_through_a_kubeconfig(core, tmp_path) -> None:
    import yaml

    from mtc_provider.hooks.jobset import MtcJobSetHook

    add_pod(core, "train-slice-0-0-aaaaa", 0, 0, "Failed", 2, "Error")
    core.write_log("train-slice-0-0-aaaaa", "ImportError: no module named maxtext")
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": core.url}}], "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    hook = MtcJobSetHook(kubeconfig=str(config))
    assert hook.failed_pod_logs("train")[1] == "ImportError: no module named maxtext"
    assert hook.leader_log_follower("train").poll() == ["ImportError: no module named maxtext"]


def test_a_failed_attempt_logs_its_failed_pods(tmp_path) -> None:
    """The launch operator's hook-in, on the local cluster with a real failing pod: when an attempt ends below
    target, the failed pods' tails (read through the pod log API) are in the task log."""
    from airflow.sdk.exceptions import AirflowException

    from mtc_local.cluster.lifecycle import stop
    from mtc_provider.operators.jobset import MtcJobSetOperator

    crash = tmp_path / "crash.py"
    crash.write_text("print('step 7', flush=True)\nraise SystemExit('RuntimeError: XLA compilation failed')\n")

    class TI:
        dag_id, run_id, task_id, try_number = "d", "r", "train", 1

        def xcom_push(self, key, value) -> None:
            pass

    home = tmp_path / "home"
    op = MtcJobSetOperator(task_id="train", target={"kind": "local", "home": str(home)},
                           slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
                           checkpointing={"run_name": "r1", "base_output_directory": str(tmp_path / "b"), "steps": 10},
                           workload={"jobset_name": "r1", "image": "local", "command": ["python3", str(crash)],
                                     "max_restarts": 0},
                           deferrable=False, poll_interval=0.1,
                           checkpoint_store_factory=lambda d, c: LocalCheckpointStore())
    # The task's logger, made a plain stdlib logger: what Airflow's logging set-up does with it varies by version.
    task_logger = logging.getLogger("test.task.train")
    op._cached_logger = op._log = task_logger
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # the task's own records, whatever the logging set-up of earlier tests
    task_logger.addHandler(handler)
    task_logger.setLevel(logging.INFO)
    try:
        with pytest.raises(AirflowException):
            op.execute({"ti": TI()})
    finally:
        task_logger.removeHandler(handler)
        stop(home)
    task_log = "\n".join(r.getMessage() for r in records)
    assert "RuntimeError: XLA compilation failed" in task_log
    assert "failed pod r1-" in task_log and "(exit 1" in task_log
