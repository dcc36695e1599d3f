"""Start-up supervision through the launch operator and its real trigger, on the local cluster with real processes
(the same KubernetesJobSetApi and kubernetes_asyncio clients as on GKE).

Documented behaviour the local cluster reproduces:
- https://kubernetes.io/docs/concepts/containers/images/#imagepullbackoff : a pod whose image cannot be pulled stays
  Pending (ErrImagePull, then ImagePullBackOff) while the kubelet retries with back-off; it starts once the pull works.
- https://jobset.sigs.k8s.io/docs/concepts/ (failurePolicy.maxRestarts): a failed Job makes JobSet recreate every
  Job; the new pods carry the next `jobset.sigs.k8s.io/restart-attempt`, the old ones get their grace period.
"""

from __future__ import annotations

import time

import pytest
from airflow.sdk.exceptions import AirflowFailException

from mtc_provider.operators.jobset import MtcJobSetOperator

pytestmark = pytest.mark.timeout(120)

# Restart attempt 0 runs `run` seconds, then slice 0 exits 42 (retryable: JobSet restarts all slices) while slice 1
# ignores SIGTERM (it lives its whole grace period); attempt 1 completes at once.
RESTARTING = """import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.environ.get("JOBSET_RESTART_ATTEMPT") == "0":
    time.sleep({run})
    if os.environ.get("JOB_INDEX") == "0":
        sys.exit(42)
    time.sleep(60)
time.sleep(0.3)
print("completed step: 1", flush=True)
"""
QUICK = """import time
time.sleep(0.5)
print("completed step: 1", flush=True)
"""


class TI:
    dag_id, run_id, task_id, try_number = "d", "r", "train", 1

    def xcom_push(self, key, value) -> None:
        pass


def operator(tmp_path, home, script: str, **kwargs) -> MtcJobSetOperator:
    path = tmp_path / "workload.py"
    path.write_text(script)
    workload = {"jobset_name": "r1", "image": "us-docker.pkg.dev/p/r/maxtext:v1", "command": ["python3", str(path)],
                "max_restarts": kwargs.pop("max_restarts", 0), "termination_grace_period_seconds": 1}
    return MtcJobSetOperator(
        task_id="train", target={"kind": "local", "home": home},
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": "r1", "base_output_directory": str(tmp_path / "b"), "steps": 1},
        workload=workload, wait_for="completion", deferrable=False, poll_interval=0.2, capacity_log_interval=0.5,
        **kwargs)


def test_startup_after_restart_gets_a_fresh_startup_timeout(tmp_path, home):
    """startup_timeout 3 s; the pods run 4.5 s, then restart 1 (the old pods stop over 1 s, the new ones start):
    each start of the pods has its own clock, so the run completes instead of "did not start within
    startup_timeout ... 2 of 2 pods scheduled" right after the restart."""
    started = time.monotonic()
    result = operator(tmp_path, home, RESTARTING.format(run=4.5), max_restarts=1,
                      startup_timeout=3).execute({"ti": TI()})
    assert result["restarts"] == 1, result
    assert time.monotonic() - started > 4.5  # the restart really came after startup_timeout


def test_transient_image_pull_heals_within_image_pull_timeout_and_the_run_completes(tmp_path, home, capsys):
    """Slice 0 cannot pull for 3 s (ErrImagePull, then ImagePullBackOff), then can: waited for, logged with the
    pod's own message, and the run completes."""
    op = operator(tmp_path, home, QUICK, image_pull_timeout=30,
                  fault_plan=[{"kind": "image_pull", "slice": 0, "seconds": 3}])
    op.execute({"ti": TI()})
    waiting = [line for line in capsys.readouterr().out.splitlines() if "waiting for the image pull" in line]
    assert waiting and "image_pull_timeout 30s" in waiting[0], waiting
    assert any('us-docker.pkg.dev/p/r/maxtext:v1' in line for line in waiting), waiting


def test_transient_image_pull_that_never_heals_fails_after_image_pull_timeout(tmp_path, home):
    """A pull that keeps failing ends the try after image_pull_timeout, with the pod's first (most telling) error."""
    started = time.monotonic()
    with pytest.raises(AirflowFailException) as failed:
        operator(tmp_path, home, QUICK, image_pull_timeout=2,
                 fault_plan=[{"kind": "image_pull", "slice": 1}]).execute({"ti": TI()})
    waited = time.monotonic() - started
    message = str(failed.value)
    assert "image_pull_timeout 2s" in message and "ImagePullBackOff" in message, message
    assert 'failed to pull and unpack image "us-docker.pkg.dev/p/r/maxtext:v1"' in message, message
    assert 2 <= waited < 30, waited
