"""A 403 from the Kubernetes API fails the try at once and for good, names the verb, the resource, the namespace and
the identity, and deletes nothing; readiness asks SelfSubjectAccessReview per verb. On the local cluster, with the
real clients, after taking one permission away from the home's token (local/cluster/access.py).

Kubernetes behaviour reproduced: a request RBAC does not allow is 403 Forbidden with the Status message
`<resource> "<name>" is forbidden: User "<user>" cannot <verb> resource "<resource>" in API group "<group>" in the
namespace "<ns>"` (k8s.io/apiserver pkg/endpoints/handlers/responsewriters/errors.go, ForbiddenStatusError);
SelfSubjectAccessReview answers status.allowed for the caller
(https://kubernetes.io/docs/reference/access-authn-authz/authorization/#checking-api-access).
"""

from __future__ import annotations

import json
import time

import pytest
from airflow.sdk.exceptions import AirflowFailException

from mtc_provider.adapters.access_review import rbac_checks
from mtc_local.target.cluster import client_factory
from mtc_provider.core.basics import labels as L
from mtc_provider.hooks.jobset import MtcJobSetHook
from mtc_local.cluster import access
from mtc_local.cluster.client import LocalCluster
from mtc_provider.operators.jobset import MtcJobSetOperator

pytestmark = pytest.mark.timeout(120)

SLEEPY = "import time\ntime.sleep(60)\n"


class TI:
    dag_id, run_id, task_id, try_number = "d", "r", "train", 1

    def xcom_push(self, key, value) -> None:
        pass


def operator(tmp_path, home: str) -> MtcJobSetOperator:
    path = tmp_path / "workload.py"
    path.write_text(SLEEPY)
    return MtcJobSetOperator(
        task_id="train", target={"kind": "local", "home": home},
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": "r1", "base_output_directory": str(tmp_path / "b"), "steps": 1},
        workload={"jobset_name": "r1", "image": "i:1", "command": ["python3", str(path)], "max_restarts": 0,
                  "termination_grace_period_seconds": 1},
        wait_for="completion", deferrable=False, poll_interval=0.2, retries=6)


def test_rbac_forbidden_on_the_run_lock_fails_the_try_at_once(tmp_path, home, api):
    """No `create configmaps`: the lock cannot be taken. The try fails for good (AirflowFailException: no Airflow
    retry) at once, naming verb, resource, namespace, identity and the connection; no JobSet was created."""
    api.list("default", "")  # the cluster is up
    access.deny(home, "create", "configmaps")
    started = time.monotonic()
    with pytest.raises(AirflowFailException) as failed:
        operator(tmp_path, home).execute({"ti": TI()})
    assert time.monotonic() - started < 10
    message = str(failed.value)
    for part in ("HTTP 403", "may not create configmaps in namespace default", 'identity "mtc-local"',
                 f"local cluster of {home}", "nothing was deleted for it", 'User "mtc-local" cannot create resource'):
        assert part in message, message
    assert api.list("default", "") == []


@pytest.mark.parametrize("verb, resource, group", [("watch", "jobsets", "jobset.x-k8s.io"), ("list", "pods", "")])
def test_rbac_forbidden_in_the_trigger_fails_the_try_and_leaves_the_jobset_and_lock(tmp_path, home, api, verb,
                                                                                  resource, group):
    """The JobSet is submitted, then the watch (or the pod listing) is refused: the try fails for good with the
    permission named, and neither the training JobSet nor the run lock is deleted (clearing the task reattaches)."""
    api.list("default", "")
    access.deny(home, verb, resource, group)
    with pytest.raises(AirflowFailException) as failed:
        operator(tmp_path, home).execute({"ti": TI()})
    message = str(failed.value)
    assert f"may not {verb} {resource}" in message and "mtc-local" in message
    assert "nothing was deleted for it" in message
    access.allow_all(home)
    (jobset,) = api.list("default", L.selector({L.RUN_NAME: "r1"}))
    assert not jobset["metadata"].get("deletionTimestamp")
    assert api.get_lock("default", L.lock_name("r1"))["metadata"]["name"] == L.lock_name("r1")
    api.delete("default", jobset["metadata"]["name"])


def test_rbac_forbidden_from_the_hook_is_not_retryable(home, api):
    api.list("default", "")
    access.deny(home, "list", "jobsets", "jobset.x-k8s.io")
    with pytest.raises(AirflowFailException, match="may not list jobsets.jobset.x-k8s.io in namespace default"):
        MtcJobSetHook(target={"kind": "local", "home": home}).find_by_run("r1")


def test_rbac_forbidden_readiness_names_each_denied_verb(home, api):
    api.list("default", "")
    assert all(check.ok for check in rbac_checks(client_factory(home), "default"))
    access.deny(home, "delete", "configmaps")
    access.deny(home, "get", "pods/log")
    access.deny(home, "watch", "events")  # issue 32: the FailedMount events of pods that do not start
    failed = {c.name: c for c in rbac_checks(client_factory(home), "default") if not c.ok}
    assert set(failed) == {"rbac_configmaps", "rbac_pods_log", "rbac_events"}
    assert failed["rbac_events"].observed == "denied: watch"
    assert failed["rbac_configmaps"].observed == "denied: delete"
    assert "kubectl create role" in failed["rbac_configmaps"].fix and "-n default" in failed["rbac_configmaps"].fix


def test_rbac_forbidden_local_cluster_answers_like_an_api_server(home, api):
    """The double's 403 has the real Status shape (reason Forbidden, code 403, the sentence) through kubectl's
    client library."""
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    api.list("default", "")
    access.deny(home, "get", "configmaps")
    with pytest.raises(ApiException) as refused:
        k8s.CoreV1Api(client_factory(home)()).read_namespaced_config_map("x", "default")
    status = json.loads(refused.value.body)
    assert (refused.value.status, status["code"], status["reason"]) == (403, 403, "Forbidden")
    assert status["message"] == ('configmaps "x" is forbidden: User "mtc-local" cannot get resource "configmaps" in '
                                 'API group "" in the namespace "default"')
