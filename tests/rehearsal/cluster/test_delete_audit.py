"""The local API server's delete audit: every DELETE, answered or refused, with who asked and why.

The provider's JobSet adapter (the one GKE uses) sends the reason and the asking process with each delete
(core.basics.vocabulary DELETE_REASON_HEADER / DELETE_CALLER_HEADER); the server appends one JSON line per DELETE to
`<home>/state/deletes.jsonl`, as a cluster's audit log records each request with its user agent
(https://kubernetes.io/docs/tasks/debug/debug-cluster/audit/: `userAgent`, `requestURI`, `responseStatus.code`).
A client that sends no reason (kubectl) is recorded by its user agent, with an empty reason.
"""

from __future__ import annotations

import asyncio
import os

from mtc_provider.adapters.kubernetes import AsyncKubernetesJobSetApi
from mtc_local.target.cluster import async_client_factory
from mtc_provider.core.basics.vocabulary import DELETE_TEARDOWN, DELETE_USER_KILL
from mtc_local.shared.state import Home, read_jsonl
from tests.support.local_cluster import make_jobset, wait_for
from tests.rehearsal.cluster.test_cluster_apiserver import kubectl

NS = "default"
PATH = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/"


def _audit(home: str) -> list[dict]:
    return read_jsonl(Home.of(home).delete_audit_file)


def test_every_jobset_delete_is_recorded_with_caller_and_reason(home, kubeconfig, api, workload):
    for name in ("aud-a", "aud-b"):
        api.create(NS, make_jobset(name, workload, args=["steps=1000", "sleep=0.1"]))
    api.delete(NS, "aud-a", reason=DELETE_TEARDOWN, timeout=30)
    asyncio.run(AsyncKubernetesJobSetApi(async_client_factory(home)).delete(NS, "aud-b", reason=DELETE_USER_KILL))
    api.delete(NS, "aud-missing", reason=DELETE_TEARDOWN, timeout=None)  # 404: recorded, not an error

    records = wait_for(lambda: (found := _audit(home)) and len(found) == 3 and found)
    by_path = {r["path"].rsplit("/", 1)[-1]: r for r in records}
    me = f"pid {os.getpid()}"
    assert by_path["aud-a"]["path"] == PATH + "aud-a"
    assert (by_path["aud-a"]["reason"], by_path["aud-a"]["code"]) == (DELETE_TEARDOWN, 200)
    assert (by_path["aud-b"]["reason"], by_path["aud-b"]["code"]) == (DELETE_USER_KILL, 200)
    assert (by_path["aud-missing"]["reason"], by_path["aud-missing"]["code"]) == (DELETE_TEARDOWN, 404)
    assert all(r["caller"].endswith(me) for r in records), records
    assert all(r["agent"] for r in records)  # the client library's User-Agent, kept beside the caller
    assert [r["time"] for r in records] == sorted(r["time"] for r in records)


def test_the_run_lock_release_is_recorded_with_its_caller(home, kubeconfig, api):
    from mtc_provider.adapters.run_lock import RunLock
    from mtc_provider.core.basics import labels as L

    lock = RunLock(api, NS, "audited", L.run_labels("d", "r", "train", "audited"))
    lock.acquire()
    lock.release()
    (record,) = wait_for(lambda: _audit(home))
    assert record["path"] == f"/api/v1/namespaces/default/configmaps/{L.lock_name('audited')}"
    assert (record["reason"], record["code"]) == ("lock-released", 200)
    assert record["caller"].endswith(f"pid {os.getpid()}")


def test_a_delete_without_reason_is_recorded_by_its_user_agent(home, kubeconfig, api, workload):
    api.create(NS, make_jobset("aud-k", workload, args=["steps=1000", "sleep=0.1"]))
    kubectl(kubeconfig, "delete", "jobset", "aud-k", "--wait=false")
    (record,) = wait_for(lambda: _audit(home))
    assert record["path"] == PATH + "aud-k" and record["code"] == 200
    assert record["reason"] == "" and record["caller"].startswith("kubectl/"), record
