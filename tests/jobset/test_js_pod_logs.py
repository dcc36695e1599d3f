"""Pod logs through the real kubernetes client against a core/v1 double, and from the local runner's records.

The double answers as the Kubernetes API documents (API reference, Pod v1 "read log"): `tailLines` keeps the last
N lines, `limitBytes` stops after N bytes, `sinceSeconds` keeps lines newer than now - N, `timestamps=true`
prefixes each line with its RFC 3339 time and a space; pods are listed by `labelSelector`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from mtc_provider.adapters.kubernetes import KubernetesJobSetApi
from mtc_provider.adapters.pod_logs import (
    KubernetesPodLogs,
    LeaderLogFollower,
    LocalPodLogs,
    failed_pod_tails,
    log_failed_pod_tails,
    pod_logs_for,
)


class CoreV1Double:
    def __init__(self) -> None:
        self.pods: dict[str, dict] = {}
        self.logs: dict[str, list[tuple[float, str]]] = {}
        self.requests: list[str] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def add_pod(self, name: str, job_index: int, host: int, phase: str = "Running", exit_code: int | None = None,
                reason: str = "", jobset: str = "train") -> None:
        state = {"terminated": {"exitCode": exit_code, "reason": reason}} if exit_code is not None else {"running": {}}
        self.pods[name] = {
            "metadata": {"name": name, "namespace": "default", "labels": {
                "jobset.sigs.k8s.io/jobset-name": jobset, "jobset.sigs.k8s.io/job-index": str(job_index),
                "batch.kubernetes.io/job-completion-index": str(host)}},
            "status": {"phase": phase, "containerStatuses": [{"name": "jax-tpu", "ready": False, "restartCount": 0,
                                                              "image": "i", "imageID": "", "state": state}]},
        }
        self.logs.setdefault(name, [])

    def write(self, pod: str, *lines: str, at: float | None = None) -> None:
        for line in lines:
            self.logs[pod].append((at if at is not None else time.time(), line))

    def _handler(self):
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                double.requests.append(self.path)
                parts = url.path.strip("/").split("/")  # api v1 namespaces NS pods [NAME log]
                if len(parts) == 5:
                    want = dict(t.split("=", 1) for t in filter(None, query.get("labelSelector", "").split(",")))
                    items = [p for p in double.pods.values()
                             if all(p["metadata"]["labels"].get(k) == v for k, v in want.items())]
                    return self._send(200, json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {},
                                                       "items": items}), "application/json")
                entries = double.logs[parts[5]]
                if "sinceSeconds" in query:
                    entries = [e for e in entries if e[0] >= time.time() - int(query["sinceSeconds"])]
                if "tailLines" in query:
                    entries = entries[-int(query["tailLines"]):] if int(query["tailLines"]) else []
                # The API server parses booleans with Go's strconv.ParseBool (the client sends "True").
                stamp = query.get("timestamps") in ("1", "t", "T", "TRUE", "true", "True")
                text = "".join(
                    (datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z ") if stamp else "")
                    + line + "\n" for t, line in entries)
                body = text.encode()[: int(query["limitBytes"])] if "limitBytes" in query else text.encode()
                return self._send(200, body, "text/plain")

            def _send(self, code: int, body, content_type: str) -> None:
                data = body.encode() if isinstance(body, str) else body
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def core():
    double = CoreV1Double()
    yield double
    double.stop()


def factory(double: CoreV1Double):
    from kubernetes import client

    return lambda: client.ApiClient(client.Configuration(host=double.url))


def test_failed_pods_tails_leader_first(core) -> None:
    core.add_pod("train-slice-0-0-aaaaa", 0, 0, "Failed", 1, "Error")
    core.add_pod("train-slice-0-1-bbbbb", 0, 1, "Running")
    core.add_pod("train-slice-1-0-ccccc", 1, 0, "Failed", 137, "OOMKilled")
    core.add_pod("other-slice-0-0-ddddd", 0, 0, "Failed", 1, "Error", jobset="other")
    core.write("train-slice-0-0-aaaaa", *[f"step {i}" for i in range(200)], "ValueError: bad config")
    core.write("train-slice-1-0-ccccc", "loading", "Killed")
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
    log_request = next(r for r in core.requests if "/log?" in r)
    assert "tailLines=3" in log_request and "limitBytes=" in log_request and "container=jax-tpu" in log_request


def test_leader_log_is_followed_without_repeating_lines(core) -> None:
    core.add_pod("train-slice-0-1-bbbbb", 0, 1)
    core.add_pod("train-slice-0-0-aaaaa", 0, 0)
    now = time.time()
    core.write("train-slice-0-0-aaaaa", "start", "step 1", at=now - 1)
    core.write("train-slice-0-1-bbbbb", "not the leader", at=now - 1)
    follower = LeaderLogFollower(KubernetesPodLogs(factory(core)), "default", "train", max_lines=10)
    assert follower.poll() == ["start", "step 1"]
    assert follower.poll() == []
    core.write("train-slice-0-0-aaaaa", "step 2", "step 3", at=time.time() + 0.01)
    assert follower.poll() == ["step 2", "step 3"]
    assert follower.pod == "train-slice-0-0-aaaaa"
    assert any("sinceSeconds=" in r for r in core.requests)


def test_reading_logs_never_fails_the_task(core, caplog) -> None:
    core.stop()  # the server is gone: connection refused
    api = KubernetesJobSetApi(factory(core))
    with caplog.at_level(logging.INFO):
        assert log_failed_pod_tails(logging.getLogger("t"), api, "default", "train") == []
    assert "could not read the failed pods' logs" in caplog.text


def test_pod_logs_for_picks_the_reader_of_the_api(tmp_path) -> None:
    assert isinstance(pod_logs_for(KubernetesJobSetApi(lambda: None)), KubernetesPodLogs)
    from mtc_provider.local.runner import LocalJobSetApi

    assert isinstance(pod_logs_for(LocalJobSetApi(home=str(tmp_path))), LocalPodLogs)
    assert pod_logs_for(object()) is None


class RecordsApi:
    """The local runner's `pods()` answer (api.LocalJobSetApi.pods): one record per pod with its log file."""

    def __init__(self, records: list[dict]) -> None:
        self.records = records

    def pods(self, namespace: str, name: str) -> list[dict]:
        return self.records


def test_local_pods_tails_and_follow(tmp_path) -> None:
    leader, other = tmp_path / "p0.log", tmp_path / "p1.log"
    leader.write_text("".join(f"completed step: {i}\n" for i in range(5)))
    other.write_text("Traceback\nRuntimeError: peer died\n")
    records = [{"name": "train-slice-0-1", "slice": 0, "host": 1, "log": str(other), "exitCode": 1},
               {"name": "train-slice-0-0", "slice": 0, "host": 0, "log": str(leader), "exitCode": None}]
    logs = LocalPodLogs(RecordsApi(records))
    assert failed_pod_tails(logs, "default", "train")[1:3] == ["Traceback", "RuntimeError: peer died"]
    follower = LeaderLogFollower(logs, "default", "train", max_lines=50)
    assert follower.poll()[-1] == "completed step: 4"
    assert follower.poll() == []
    with open(leader, "a") as log:
        log.write("completed step: 5\n")
    assert follower.poll() == ["completed step: 5"]


def test_the_hook_reads_failed_pods_through_a_kubeconfig(core, tmp_path) -> None:
    import yaml

    from mtc_provider.hooks.jobset import MtcJobSetHook

    core.add_pod("train-slice-0-0-aaaaa", 0, 0, "Failed", 2, "Error")
    core.write("train-slice-0-0-aaaaa", "ImportError: no module named maxtext")
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": core.url}}], "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    hook = MtcJobSetHook(kubeconfig=str(config))
    assert hook.failed_pod_logs("train")[1] == "ImportError: no module named maxtext"
    assert hook.leader_log_follower("train").poll() == ["ImportError: no module named maxtext"]


def test_a_failed_attempt_logs_its_failed_pods(tmp_path, cluster, caplog) -> None:
    """The launch operator's hook-in: when an attempt ends below target, the failed pods' tails are in the log."""
    from airflow.sdk.exceptions import AirflowException

    from mtc_provider.adapters import jobset_factory
    from tests.doubles.memory_jobset import AsyncMemoryJobSetApi, MemoryJobSetApi, status_failed
    from mtc_provider.operators.jobset import MtcJobSetOperator

    crash_log = tmp_path / "pod.log"
    crash_log.write_text("step 7\nRuntimeError: XLA compilation failed\n")

    class WithPods(MemoryJobSetApi):  # the local runner's pod records, beside the in-memory JobSets
        def pods(self, namespace, name):
            return [{"name": f"{name}-slice-0-0", "slice": 0, "host": 0, "log": str(crash_log), "exitCode": 137}]

        def log_dir(self, namespace, name):
            return tmp_path

    cluster.plan([status_failed()])

    class TI:
        dag_id, run_id, task_id, try_number = "d", "r", "train", 1

        def xcom_push(self, key, value) -> None:
            pass

    op = MtcJobSetOperator(task_id="train", slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
                           checkpointing={"run_name": "r1", "base_output_directory": str(tmp_path), "steps": 10},
                           workload={"jobset_name": "r1"}, deferrable=False, poll_interval=0.01,
                           checkpoint_store_factory=lambda d, c: type("S", (), {"latest_step": lambda s, d: None})())
    # The task's logger, made a plain stdlib logger: what Airflow's logging set-up does with it varies by version.
    task_logger = logging.getLogger("test.task.train")
    op._cached_logger = op._log = task_logger
    with jobset_factory.registered("local", lambda c: WithPods(cluster), lambda c: AsyncMemoryJobSetApi(cluster)):
        with caplog.at_level(logging.INFO), pytest.raises(AirflowException):
            op.execute({"ti": TI()})
    task_log = "\n".join(r.getMessage() for r in caplog.records if r.name == "test.task.train")
    assert "RuntimeError: XLA compilation failed" in task_log
    assert "failed pod r1-" in task_log and "(exit 137)" in task_log
