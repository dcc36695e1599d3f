"""The local API server's store, with plain values: resourceVersions, watch history, 410, bookmarks, CAS, selectors.

Behaviour as https://kubernetes.io/docs/reference/using-api/api-concepts/ documents it (#resource-versions,
#efficient-detection-of-changes, #410-gone-responses, #watch-bookmarks) and label selectors as
https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors.
"""

from __future__ import annotations

import pytest

from mtc_local.cluster.errors import StatusError
from mtc_local.cluster.resources import CONFIGMAPS, JOBSETS
from mtc_local.cluster.selectors import SelectorError, label_matcher
from mtc_local.cluster.store import Store


def _cm(name: str, labels: dict | None = None, **data: str) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data}


def test_every_write_gets_a_new_cluster_wide_resource_version():
    store = Store()
    a = store.create(CONFIGMAPS, "default", _cm("a"))
    b = store.create(CONFIGMAPS, "default", _cm("b"))
    assert int(b["metadata"]["resourceVersion"]) == int(a["metadata"]["resourceVersion"]) + 1
    assert store.list(CONFIGMAPS, "default")[1] == b["metadata"]["resourceVersion"]


def test_create_of_an_existing_name_is_409_already_exists():
    store = Store()
    store.create(CONFIGMAPS, "default", _cm("lock"))
    with pytest.raises(StatusError) as err:
        store.create(CONFIGMAPS, "default", _cm("lock"))
    assert (err.value.code, err.value.reason) == (409, "AlreadyExists")
    assert err.value.message == 'configmaps "lock" already exists'


def test_replace_with_a_stale_resource_version_is_409_conflict():
    store = Store()
    first = store.create(CONFIGMAPS, "default", _cm("lock", holder="a"))
    store.replace(CONFIGMAPS, "default", "lock", {**first, "data": {"holder": "b"}})
    with pytest.raises(StatusError) as err:
        store.replace(CONFIGMAPS, "default", "lock", {**first, "data": {"holder": "c"}})
    assert (err.value.code, err.value.reason) == (409, "Conflict")
    assert store.get(CONFIGMAPS, "default", "lock")["data"] == {"holder": "b"}


def test_get_of_a_missing_object_is_404_with_the_resource_named():
    with pytest.raises(StatusError) as err:
        Store().get(JOBSETS, "default", "nope")
    assert (err.value.code, err.value.message) == (404, 'jobsets.jobset.x-k8s.io "nope" not found')


def test_watch_from_a_version_sends_only_later_changes_then_deleted():
    store = Store()
    created = store.create(CONFIGMAPS, "default", _cm("x"))
    store.replace(CONFIGMAPS, "default", "x", {**created, "data": {"k": "1"}})
    store.remove(CONFIGMAPS, "default", "x")
    events = list(store.watch(CONFIGMAPS, "default", created["metadata"]["resourceVersion"], timeout=0.2))
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]


def test_watch_without_a_version_starts_with_added_for_what_exists():
    store = Store()
    store.create(CONFIGMAPS, "default", _cm("x", {"app": "a"}))
    store.create(CONFIGMAPS, "default", _cm("y", {"app": "b"}))
    events = list(store.watch(CONFIGMAPS, "default", None, label_selector="app=a", timeout=0.2))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "x")]


def test_watch_from_a_version_older_than_the_history_is_410_expired():
    store = Store(history=2)
    first = store.create(CONFIGMAPS, "default", _cm("a"))
    for name in "bcd":
        store.create(CONFIGMAPS, "default", _cm(name))
    [event] = list(store.watch(CONFIGMAPS, "default", first["metadata"]["resourceVersion"], timeout=0.2))
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")
    assert event["object"]["message"].startswith(f"too old resource version: {first['metadata']['resourceVersion']}")


def test_bookmarks_carry_the_current_version_when_asked_for():
    store = Store()
    store.create(CONFIGMAPS, "default", _cm("a"))
    other = store.create(CONFIGMAPS, "kube-system", _cm("b"))  # not watched: the bookmark still moves past it
    events = list(store.watch(CONFIGMAPS, "default", "1", timeout=0.5, bookmark_every=0.1))
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks and bookmarks[-1]["object"]["metadata"] == {"resourceVersion": other["metadata"]["resourceVersion"]}
    assert not [e for e in store.watch(CONFIGMAPS, "default", "1", timeout=0.3) if e["type"] == "BOOKMARK"]


@pytest.mark.parametrize("selector, labels, expected", [
    ("a=1", {"a": "1"}, True), ("a==1", {"a": "2"}, False), ("a!=1", {}, True), ("a", {"a": ""}, True),
    ("!a", {"a": "1"}, False), ("a in (1, 2),b", {"a": "2", "b": "x"}, True), ("a notin (1,2)", {"a": "1"}, False),
])
def test_label_selectors(selector, labels, expected):
    assert label_matcher(selector)(labels) is expected


def test_an_unparsable_selector_is_refused():
    with pytest.raises(SelectorError):
        label_matcher("a b c")


def test_event_field_selectors_as_the_api_server_reads_them():
    """Events are selected by involvedObject.*, reason, type and source (kubernetes
    pkg/registry/core/event/strategy.go); other resources only by metadata.name / metadata.namespace."""
    from mtc_local.cluster.selectors import field_matcher

    event = {"metadata": {"name": "p.1", "namespace": "ml"}, "involvedObject": {"kind": "Pod", "name": "p"},
             "reason": "FailedMount", "type": "Warning", "source": {"component": "kubelet", "host": "localhost"}}
    assert field_matcher("involvedObject.kind=Pod,type=Warning", "Event")(event)
    assert field_matcher("involvedObject.name=p,reason=FailedMount,source=kubelet", "Event")(event)
    assert not field_matcher("involvedObject.name!=p", "Event")(event)
    assert field_matcher("metadata.name=p.1", "Event")(event)
    with pytest.raises(SelectorError, match="field label not supported: involvedObject.name"):
        field_matcher("involvedObject.name=p", "Pod")
