"""Pods that never start, and a JobSet that stays while it terminates, on the local cluster with real processes,
through the launch operator (the same KubernetesJobSetApi and trigger as on GKE); the faults come from the plan.

Documented behaviour reproduced by the local cluster:
- https://kubernetes.io/docs/concepts/containers/images/#imagepullbackoff : a pod whose image cannot be pulled stays
  Pending, its container waiting with reason ErrImagePull, then ImagePullBackOff; its Job never fails.
- https://kubernetes.io/docs/concepts/scheduling-eviction/kube-scheduler/ : a pod no node can take stays Pending with
  condition PodScheduled=False, reason Unschedulable, the scheduler's "0/N nodes are available: ..." message.
- https://kubernetes.io/docs/concepts/architecture/garbage-collection/#foreground-deletion : a foreground-deleted
  JobSet stays readable (deletionTimestamp set) until its pods, which get terminationGracePeriodSeconds, are gone.
"""

from __future__ import annotations

import logging
import time

import pytest
from airflow.sdk.exceptions import AirflowFailException

from mtc_provider.operators.jobset import MtcJobSetOperator

pytestmark = pytest.mark.timeout(180)

# Ignores SIGTERM (as a process busy saving would), so a deleted pod lives its whole grace period.
WORKLOAD = """import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for step in range(1, 4):
    time.sleep({pause})
    print(f"completed step: {{step}}", flush=True)
"""


class TI:
    dag_id, run_id, task_id = "d", "r", "train"

    def __init__(self, try_number: int = 1) -> None:
        self.try_number = try_number

    def xcom_push(self, key, value) -> None:
        pass


def _operator(tmp_path, fault_plan, pause: float = 0.3, grace: int = 30, **kwargs) -> MtcJobSetOperator:
    script = tmp_path / "workload.py"
    script.write_text(WORKLOAD.format(pause=pause))
    op = MtcJobSetOperator(
        task_id="train", target={"kind": "local", "home": str(tmp_path / "home")},
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": "r1", "base_output_directory": str(tmp_path / "b"), "steps": 3},
        workload={"jobset_name": "r1", "image": "us-docker.pkg.dev/p/r/maxtext:missing",
                  "command": ["python3", str(script)], "max_restarts": 0, "termination_grace_period_seconds": grace},
        wait_for="completion", deferrable=False, poll_interval=0.2, capacity_log_interval=0.5,
        fault_plan=fault_plan, **kwargs)
    return op


class TaskLog:
    """The operator's own records, whatever the logging set-up of earlier tests (as test_js_pod_logs does)."""

    def __init__(self, op: MtcJobSetOperator) -> None:
        self.records: list[logging.LogRecord] = []
        self.logger = logging.getLogger(f"test.task.{id(op)}")
        op._cached_logger = op._log = self.logger
        handler = logging.Handler(logging.INFO)
        handler.emit = self.records.append
        self.logger.addHandler(handler)
        self.logger.setLevel(logging.INFO)

    @property
    def text(self) -> str:
        return "\n".join(r.getMessage() for r in self.records)



def test_image_pull_fails_after_image_pull_timeout_then_the_terminating_jobset_is_waited_for(tmp_path, home):
    """Try 1: slice 0 cannot pull its image (no `seconds`: never) -> after image_pull_timeout the try fails with the
    pod's own ErrImagePull message and the JobSet is deleted (foreground); slice 1's pods ignore SIGTERM, so the JobSet
    stays terminating for their 3 s grace period. Try 2 waits for it to go, then submits; the fault fired once."""
    plan = [{"kind": "image_pull", "slice": 0}]
    started = time.monotonic()
    with pytest.raises(AirflowFailException) as failed:
        _operator(tmp_path, plan, pause=5, grace=3, image_pull_timeout=1).execute({"ti": TI(1)})
    first = time.monotonic() - started
    message = str(failed.value)
    assert "image_pull_timeout 1s" in message and "ErrImagePull" in message, message
    assert 'failed to pull and unpack image "us-docker.pkg.dev/p/r/maxtext:missing"' in message
    assert first < 30, first  # bounded by image_pull_timeout: not after a stall or startup timeout

    second = _operator(tmp_path, plan, pause=0.3, grace=3)
    log = TaskLog(second)
    started = time.monotonic()
    second.execute({"ti": TI(2)})
    assert "to finish terminating" in log.text and "is gone" in log.text, log.text
    assert time.monotonic() - started >= 1.0  # it waited for the grace period, not a fresh cluster


def test_unschedulable_for_a_while_logs_waiting_for_capacity_then_runs(tmp_path, home, capsys):
    """Capacity arrives after 3 s: "waiting for capacity" with the scheduler's message, then the run completes
    (well within startup_timeout, which bounds the test should the pods never be scheduled)."""
    _operator(tmp_path, [{"kind": "unschedulable", "slice": 1, "seconds": 3}], startup_timeout=20).execute({"ti": TI()})
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "waiting for capacity" in ln]
    assert lines and "0/1 nodes are available: 1 Insufficient google.com/tpu" in lines[0], lines


def test_unschedulable_longer_than_startup_timeout_fails_naming_the_timeout(tmp_path, home):
    with pytest.raises(AirflowFailException, match="did not start within startup_timeout 2s") as failed:
        _operator(tmp_path, [{"kind": "unschedulable", "slice": 0, "seconds": 60}],
                  startup_timeout=2).execute({"ti": TI()})
    assert "waiting for capacity" in str(failed.value) and "Insufficient google.com/tpu" in str(failed.value)


def test_a_ramdisk_that_cannot_be_mounted_is_logged_with_its_events_and_bounded_by_startup_timeout(
        tmp_path, home, capsys):
    """Issue 32 (4). A pod whose MTC CSI ramdisk cannot be mounted is scheduled and stays Pending, its container
    waiting ContainerCreating; only the kubelet's Warning events say why: FailedMount, "MountVolume.SetUp failed for
    volume ...", with the node (https://kubernetes.io/docs/tasks/debug/debug-application/debug-pods/ -- `kubectl
    describe pod` shows them; https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/).
    The trigger reads them through kubernetes-asyncio from the local API server's events list, logs them while it
    waits, and the startup-timeout failure carries them."""
    with pytest.raises(AirflowFailException, match="did not start within startup_timeout 3s") as failed:
        _operator(tmp_path, [{"kind": "mount_failure", "slice": 1}], startup_timeout=3).execute({"ti": TI()})
    message = str(failed.value)
    assert "ContainerCreating" in message and "Kubernetes events: pod r1-" in message, message
    assert "on node localhost: FailedMount" in message and "MountVolume.SetUp failed for volume" in message
    assert "multitier-checkpoint.csi.storage.gke.io not found in the list of registered CSI drivers" in message
    waiting = [ln for ln in capsys.readouterr().out.splitlines() if "waiting for the pods to start" in ln]
    assert waiting and "FailedMount" in waiting[0], waiting  # logged every capacity_log_interval while it waits
