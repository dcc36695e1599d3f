"""An Airflow retry's task process imports, before it creates its next JobSet, only what that create needs: the
kubernetes client (the run lock, this task's JobSets, the create) and google-cloud-storage (the checkpoint listing
the launch decides on). Not the google provider's GCS hook module, which loads gcloud-aio-storage and aiohttp,
googleapiclient and httplib2 and the Secret Manager client (adapters.gcs_endpoint), and not the async Kubernetes
stack (kubernetes_asyncio, the cncf.kubernetes hooks), which only a trigger uses. Each try runs in a fresh
interpreter, as Airflow's task process does after its fork, on the local target: the home's local cluster (runner,
pods as processes) and its local GCS, both real processes. Not timed: docs/benchmarks.md, section 2, has the seconds
(benchmarks/retry_setup.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.local_cluster import terminal

pytestmark = pytest.mark.timeout(240)

RUN = "retry-imports"
# What no path before the create may load (packages and modules, each checked by its own name).
HEAVY = ("airflow.providers.google.cloud.hooks.gcs", "google.cloud.secretmanager_v1", "gcloud", "aiohttp",
         "googleapiclient", "httplib2", "kubernetes_asyncio", "airflow.providers.cncf.kubernetes.hooks")

PROBE = """
import json, sys
from mtc_provider.operators.jobset import MtcJobSetOperator  # the DAG file's import
from airflow.sdk.exceptions import TaskDeferred
from mtc_provider.adapters import kubernetes

home, try_number, heavy = sys.argv[1], int(sys.argv[2]), tuple(json.loads(sys.argv[3]))
at_create = []
create = kubernetes.KubernetesJobSetApi.create

def spied(self, namespace, body):
    at_create.append([name for name in heavy if name in sys.modules])
    return create(self, namespace, body)

kubernetes.KubernetesJobSetApi.create = spied

class TI:
    dag_id, task_id, run_id, map_index, max_tries = "dag", "train", "%(run)s", -1, 3
    def __init__(self): self.try_number, self.xcoms = try_number, {}
    def xcom_push(self, key, value): self.xcoms[key] = value
    def xcom_pull(self, task_ids=None, key="return_value"): return self.xcoms.get(key)

operator = MtcJobSetOperator(
    task_id="train",
    slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2, "machine_type": "ct6e-standard-4t"},
    checkpointing={"run_name": "%(run)s", "base_output_directory": f"{home}/buckets/ckpt", "steps": 10},
    workload={"jobset_name": "%(run)s", "image": "local", "max_restarts": 0, "termination_grace_period_seconds": 5,
              "command": ["python3", "-c", "import time; time.sleep(600)"]},
    target={"kind": "local", "home": home},
    fault_plan=[{"kind": "sigkill_host", "at_seconds": 0.5, "slice": 1, "host": 0}],
    deferrable=True, retries=2)
try:
    operator.execute({"ti": TI(), "run_id": "%(run)s"})
except TaskDeferred:
    pass
print(json.dumps(at_create))
""" % {"run": RUN}


def _try(home: str, try_number: int) -> list[list[str]]:
    done = subprocess.run([sys.executable, "-c", PROBE, home, str(try_number), json.dumps(HEAVY)],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_retry_creates_its_next_jobset_without_the_gcs_hook_module_or_the_async_client(home, api):
    assert _try(home, 1) == [[]]  # the first launch: one create, nothing heavy loaded before it
    first = [o["metadata"]["name"] for o in api.list("default")]
    assert len(first) == 1
    assert terminal(api, "default", first[0], timeout=60)["status"]["terminalState"] == "Failed"  # the host loss
    assert _try(home, 2) == [[]]  # the retry: it listed, deleted the ended attempt and created the next one
    assert [o["metadata"]["name"] for o in api.list("default") if o["metadata"]["name"] != first[0]]
