"""The Kubernetes adapter on the wire: real `kubernetes` / `kubernetes_asyncio` clients against a fake API server."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time

import pytest

from tests.support.js_helpers import jobset_body
from mtc_provider.adapters import retry
from mtc_provider.adapters.kubernetes import AsyncKubernetesJobSetApi, KubernetesJobSetApi
from tests.doubles.memory_jobset import status_completed, status_running
from mtc_provider.adapters.protocols import AlreadyExists, NotFound

pytestmark = pytest.mark.timeout(60)


def _tokens():
    counter = itertools.count(1)
    return lambda: f"tok-{next(counter)}"


def sync_api(server) -> KubernetesJobSetApi:
    from kubernetes import client

    mint = _tokens()

    def factory():  # like GKEKubernetesHook.get_conn: a new client with a fresh token each time
        token = mint()
        config = client.Configuration(host=server.url, api_key={"authorization": token, "BearerToken": token},
                                      api_key_prefix={"authorization": "Bearer", "BearerToken": "Bearer"})
        return client.ApiClient(config)

    return KubernetesJobSetApi(factory)


def async_api(server, **kwargs) -> AsyncKubernetesJobSetApi:
    from kubernetes_asyncio import client

    mint = _tokens()

    @contextlib.asynccontextmanager
    async def factory():  # like GKEKubernetesAsyncHook.get_conn
        api_client = client.ApiClient(client.Configuration(host=server.url), header_name="Authorization",
                                      header_value=f"Bearer {mint()}")
        try:
            yield api_client
        finally:
            await api_client.close()

    return AsyncKubernetesJobSetApi(factory, **kwargs)


def test_create_get_list_delete(apiserver, fast_retries):
    api = sync_api(apiserver)
    created = api.create("ml", jobset_body("train", {"run": "r1"}))
    assert created["metadata"]["resourceVersion"] == "1"
    with pytest.raises(AlreadyExists):
        api.create("ml", jobset_body("train", {"run": "r1"}))
    assert api.get("ml", "train")["metadata"]["labels"] == {"run": "r1"}  # reattach reads what exists
    api.create("ml", jobset_body("other", {"run": "r2"}))
    assert [o["metadata"]["name"] for o in api.list("ml", "run=r1")] == ["train"]
    api.delete("ml", "train")
    delete = [r for r in apiserver.requests if r.method == "DELETE"][-1]
    assert "Foreground" in (str(delete.query) + str(delete.body))
    # Foreground deletion: still readable, marked, until its pods are gone.
    assert api.get("ml", "train")["metadata"]["finalizers"] == ["foregroundDeletion"]
    api.delete("ml", "train")  # deleting a terminating object again is fine
    with pytest.raises(NotFound):
        api.get("ml", "train")
    api.delete("ml", "train")  # missing is not an error
    assert [o["metadata"]["name"] for o in api.list("ml", "")] == ["other"]


def test_terminating_pods_and_run_lock_over_the_wire(apiserver, fast_retries):
    """The run lock is a ConfigMap: create-if-absent (409 AlreadyExists), replace compare-and-set (409)."""
    from tests.doubles.memory_jobset import pod_unschedulable
    from mtc_provider.adapters.protocols import ApiError
    from mtc_provider.adapters.run_lock import LockHeld, RunLock
    from mtc_provider.core.basics import labels as L

    api = sync_api(apiserver)
    apiserver.pods = [pod_unschedulable("train-a1", 0), pod_unschedulable("other", 0)]
    assert [p["metadata"]["name"] for p in api.list_pods("ml", "train-a1")] == ["train-a1-slice-0-0-x0000"]
    mine = RunLock(api, "ml", "llama", L.run_labels("dag", "run-1", "train", "llama"))
    theirs = RunLock(api, "ml", "llama", L.run_labels("dag", "run-2", "train", "llama"))
    assert mine.acquire()["history"] == []
    with pytest.raises(LockHeld):
        theirs.acquire()
    mine.update(lambda data: data["history"].append(20))
    assert mine.acquire()["history"] == [20]  # a retry of the same task finds its own lock and history
    stale = api.get_lock("ml", mine.name)
    mine.update(lambda data: data["history"].append(40))
    with pytest.raises(ApiError) as conflict:
        api.replace_lock("ml", mine.name, stale)
    assert conflict.value.status == 409
    mine.release()
    assert theirs.acquire()["history"] == []


def test_transient_errors_are_retried_with_bounded_backoff(apiserver, fast_retries):
    api = sync_api(apiserver)
    apiserver.errors_next += [503, 429]
    api.create("ml", jobset_body())
    assert [r.method for r in apiserver.requests] == ["POST"] * 3
    apiserver.errors_next += [503] * 10
    with pytest.raises(retry.Retryable) as err:
        api.get("ml", "train")
    assert err.value.status == 503
    assert len(apiserver.requests) == 3 + retry.ATTEMPTS  # bounded, then the error surfaces


def test_expired_token_gets_a_fresh_client(apiserver, fast_retries):
    api = sync_api(apiserver)
    api.create("ml", jobset_body())
    apiserver.errors_next.append(401)
    assert api.get("ml", "train")["metadata"]["name"] == "train"
    first, second = apiserver.requests[-2:]
    assert first.auth.startswith("Bearer tok-") and first.auth != second.auth


def test_one_client_serves_a_launchs_claim_and_lock_and_a_second_writer_is_still_refused(apiserver, fast_retries):
    """A try's claim and run lock share one client (one token minted), and the lock stays create-if-absent and
    compare-and-set: a second run writing the same directory is refused through that same api and through its own."""
    from mtc_provider.adapters.run_lock import LockHeld, RunLock
    from mtc_provider.core.basics import labels as L

    api = sync_api(apiserver)
    owner = {"dag_id": "dag", "run_id": "run-1", "task_id": "train", "map_index": -1, "try_number": 1}
    mine = RunLock(api, "ml", "llama", L.run_labels("dag", "run-1", "train", "llama"), owner, deployment="d",
                   claims_namespace="locks")
    mine.acquire(checkpoint_dir="gs://b/llama")
    again = RunLock(api, "ml", "llama", L.run_labels("dag", "run-1", "train", "llama"), {**owner, "try_number": 2},
                    deployment="d", claims_namespace="locks")
    again.acquire(checkpoint_dir="gs://b/llama")  # the retry: reads, and records its try in both objects
    assert [r.method for r in apiserver.requests] == ["GET", "POST", "GET", "POST", "GET", "PUT", "GET", "PUT"]
    assert len({r.auth for r in apiserver.requests}) == 1  # one client, one token, for all eight requests
    for other_api in (api, sync_api(apiserver)):
        theirs = RunLock(other_api, "team-b", "llama", L.run_labels("dag", "run-2", "train", "llama"),
                         {**owner, "run_id": "run-2"}, deployment="d", claims_namespace="locks")
        with pytest.raises(LockHeld, match="held by DAG dag, run run-1"):
            theirs.acquire(checkpoint_dir="gs://b/llama")
    assert len(apiserver.configmaps) == 2  # the claim and the run lock: the refused run created nothing


def test_a_shared_client_is_dropped_after_a_failed_request_and_when_it_is_old(apiserver, fast_retries):
    api = sync_api(apiserver)
    api.create("ml", jobset_body())
    apiserver.errors_next.append(503)
    api.get("ml", "train")
    failed, retried = apiserver.requests[-2:]
    assert failed.auth == apiserver.requests[0].auth and retried.auth != failed.auth  # the 503's client is dropped
    api.client_reuse_seconds = 0.05
    time.sleep(0.1)
    api.get("ml", "train")
    assert apiserver.requests[-1].auth != retried.auth  # an old client is replaced: a fresh token


def test_a_twin_with_another_outage_bound_shares_the_client_from_many_threads(apiserver, fast_retries):
    """One trigger's steps share one client from worker threads, the create's with its own outage bound."""
    from concurrent.futures import ThreadPoolExecutor

    api = sync_api(apiserver)
    api.create("ml", jobset_body())
    twin = api.waiting_out(30.0)
    assert (api.outage_timeout, twin.outage_timeout) == (0.0, 30.0)
    with ThreadPoolExecutor(8) as pool:
        names = list(pool.map(lambda each: each.get("ml", "train")["metadata"]["name"], [api, twin] * 8))
    assert names == ["train"] * 16 and len(apiserver.requests) == 17
    assert len({r.auth for r in apiserver.requests}) == 1  # one client, one token: every thread, both bounds
    apiserver.errors_next.append(503)
    twin.get("ml", "train")  # the twin's failed request drops the shared client: both open a fresh one
    assert apiserver.requests[-1].auth != apiserver.requests[0].auth
    api.get("ml", "train")
    assert apiserver.requests[-1].auth == apiserver.requests[-2].auth


def test_a_delete_gets_its_own_client_so_its_reason_header_stays_off_later_requests(apiserver, fast_retries):
    api = sync_api(apiserver)
    api.create("ml", jobset_body())
    api.delete("ml", "train", reason="attempt-ended")
    api.list("ml", "")
    create, delete, listing = apiserver.requests[-3:]
    assert delete.auth != create.auth and listing.auth == create.auth
    assert not any("attempt-ended" in str(value) for value in listing.headers.values())


async def _collect(api, until_phase: str = "Completed", resource_version=None) -> list:
    events = []
    async for event in api.watch("ml", "train", resource_version):
        events.append(event)
        if event.obj.get("status", {}).get("terminalState") == until_phase:
            break
    return events


async def test_watch_streams_events_and_resumes_after_stream_end(apiserver, fast_retries):
    apiserver.put("ml", jobset_body())
    apiserver.script += [status_running(), "end-stream", status_completed()]
    events = await _collect(async_api(apiserver))
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "MODIFIED"]
    watches = [r for r in apiserver.requests if r.query.get("watch")]
    assert [w.query["resourceVersion"] for w in watches[:2]] == ["1", "2"]  # resumed, not restarted
    assert watches[0].query["fieldSelector"] == "metadata.name=train"


async def test_watch_relists_on_410_gone(apiserver, fast_retries):
    apiserver.put("ml", jobset_body())
    apiserver.set_status("ml", "train", status_running())
    apiserver.script += ["410", status_completed()]
    events = await _collect(async_api(apiserver), resource_version="1")
    assert events[-1].obj["status"]["terminalState"] == "Completed"
    methods = [(r.method, bool(r.query.get("watch"))) for r in apiserver.requests]
    # watch -> (stream ends) -> watch answers ERROR 410 -> GET (relist) -> watch from the fresh version
    assert methods[:4] == [("GET", True), ("GET", True), ("GET", False), ("GET", True)]
    assert apiserver.requests[3].query["resourceVersion"] == "2"


async def test_watch_relist_after_410_that_finds_the_jobset_gone_is_its_deletion(apiserver, fast_retries):
    """The relist after 410 Gone (https://kubernetes.io/docs/reference/using-api/api-concepts/#410-gone-responses)
    is the truth: a JobSet it does not find was deleted (its DELETED event went with the expired history), not a
    broken watch (an ERROR event, which ends the attempt as "lost track")."""
    apiserver.put("ml", jobset_body())
    apiserver.watch_gone = 1
    del apiserver.jobsets[("ml", "train")]  # deleted, and the event compacted away
    events = await asyncio.wait_for(_collect(async_api(apiserver), resource_version="1"), 20)
    assert [e.type for e in events] == ["DELETED"] and events[0].obj["metadata"]["name"] == "train"


async def test_watch_from_now_of_a_jobset_already_gone_is_its_deletion(apiserver, fast_retries):
    events = await asyncio.wait_for(_collect(async_api(apiserver)), 20)
    assert [e.type for e in events] == ["DELETED"]


async def test_watch_survives_401_mid_watch_with_a_fresh_token(apiserver, fast_retries):
    apiserver.put("ml", jobset_body())
    apiserver.script += [status_running(), "401", status_completed()]
    events = await _collect(async_api(apiserver))
    assert events[-1].obj["status"]["terminalState"] == "Completed"
    auths = [r.auth for r in apiserver.requests]
    assert len(set(auths)) == len(auths)  # every client minted its own token


async def test_watch_backs_off_on_503_then_falls_back_to_polling(apiserver, fast_retries, monkeypatch):
    monkeypatch.setattr(retry, "ATTEMPTS", 2)
    apiserver.put("ml", jobset_body())
    apiserver.errors_next += [503, 429]  # two watch requests in a row fail: watching does not work here
    api = async_api(apiserver, poll_interval=0.01)
    task = asyncio.ensure_future(_collect(api, resource_version="1"))
    while not api.polling:
        await asyncio.sleep(0.01)
    apiserver.set_status("ml", "train", status_completed())
    events = await asyncio.wait_for(task, 20)
    assert events[-1].obj["status"]["terminalState"] == "Completed"
    # the watch answered 503 then 429: ATTEMPTS=2 consecutive failures, then polling (GETs) found the change
    assert sum(1 for r in apiserver.requests if r.query.get("watch")) == 2
    assert apiserver.requests[-1].method == "GET" and not apiserver.requests[-1].query.get("watch")


async def test_async_get_and_delete(apiserver, fast_retries):
    apiserver.put("ml", jobset_body())
    api = async_api(apiserver)
    apiserver.errors_next.append(503)
    assert (await api.get("ml", "train"))["metadata"]["name"] == "train"
    await api.delete("ml", "train")
    await api.delete("ml", "train")
    assert (await api.get("ml", "train"))["metadata"]["deletionTimestamp"]  # foreground: still there, marked
    with pytest.raises(NotFound):
        await api.get("ml", "train")


async def test_async_list_pods_reads_the_waiting_reason(apiserver, fast_retries):
    from tests.doubles.memory_jobset import pod_waiting
    from mtc_provider.core.attempt.status import evaluate_pods

    apiserver.pods = [pod_waiting("train-a1", "ImagePullBackOff", index=0)]
    pods = await async_api(apiserver).list_pods("ml", "train-a1")
    state = evaluate_pods(pods)
    # The kubelet retries pulls with back-off: a healing error, not a permanent one.
    assert state.total == 1 and "ImagePullBackOff" in state.healing_error and not state.permanent_error


async def test_watch_timeout_polling_returns_to_watching(apiserver, fast_retries, monkeypatch):
    """Polling is a fallback: after rewatch_after seconds of it the adapter watches again."""
    monkeypatch.setattr(retry, "ATTEMPTS", 2)
    apiserver.put("ml", jobset_body())
    apiserver.errors_next += [503, 503]  # two watch requests in a row fail: polling stands in
    api = async_api(apiserver, poll_interval=0.02, rewatch_after=0.3)
    task = asyncio.ensure_future(_collect(api, resource_version="1"))
    while not api.polling:
        await asyncio.sleep(0.01)
    while api.polling:  # after 0.3 s of polling it watches again
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    apiserver.set_status("ml", "train", status_completed())
    events = await asyncio.wait_for(task, 20)
    assert events[-1].obj["status"]["terminalState"] == "Completed"
    kinds = ["watch" if r.query.get("watch") else "get" for r in apiserver.requests]
    assert kinds[:2] == ["watch", "watch"] and "get" in kinds[2:]
    assert kinds[-1] == "watch" or "watch" in kinds[kinds.index("get"):]  # watching again after the polls
