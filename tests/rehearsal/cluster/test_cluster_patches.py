"""PATCH documents and update rules of the local API server, with plain values.

Examples from RFC 7386 appendix A (https://www.rfc-editor.org/rfc/rfc7386#appendix-A) and RFC 6902 appendix A
(https://www.rfc-editor.org/rfc/rfc6902#appendix-A); the JobSet rules are its CRD's transition rules
(https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#transition-rules)
and kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go ValidateUpdate.
"""

from __future__ import annotations

import pytest

from mtc_local.cluster import patches, updates
from mtc_local.cluster.errors import StatusError
from mtc_local.cluster.resources import JOBSETS


@pytest.mark.parametrize("target, patch, result", [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
])
def test_merge_patch_rfc7386_examples(target, patch, result):
    assert patches.apply(patches.MERGE, target, patch) == result


def test_json_patch_rfc6902_operations():
    doc = {"foo": ["bar", "baz"], "a/b": 1, "m~n": 2, "q": {"x": 1}}
    out = patches.apply(patches.JSON_PATCH, doc, [
        {"op": "add", "path": "/foo/1", "value": "qux"},
        {"op": "add", "path": "/foo/-", "value": "end"},
        {"op": "remove", "path": "/a~1b"},
        {"op": "replace", "path": "/m~0n", "value": 3},
        {"op": "move", "from": "/q/x", "path": "/moved"},
        {"op": "copy", "from": "/foo/0", "path": "/copied"},
        {"op": "test", "path": "/foo", "value": ["bar", "qux", "baz", "end"]},
    ])
    assert out == {"foo": ["bar", "qux", "baz", "end"], "m~n": 3, "q": {}, "moved": 1, "copied": "bar"}
    assert doc["foo"] == ["bar", "baz"]  # the stored object is never changed in place


@pytest.mark.parametrize("operations, code, words", [
    ([{"op": "test", "path": "/baz", "value": "bar"}], 422, "testing value /baz failed"),
    ([{"op": "add", "path": "/baz/bat", "value": "qux"}], 422, "doc is missing path: /baz/bat"),
    ([{"op": "remove", "path": "/nope"}], 422, "doc is missing key: /nope"),
    ([{"op": "replace", "path": "/foo/5", "value": 1}], 422, "index 5 is out of range"),
    ([{"op": "frobnicate", "path": "/a"}], 400, 'supported values: "add", "remove"'),
    ([{"op": "add", "path": "baz", "value": 1}], 400, "patch[0].path"),
    ({"op": "add"}, 400, "must be a list of operations"),
])
def test_json_patch_errors_name_the_operation_and_path(operations, code, words):
    with pytest.raises(StatusError) as err:
        patches.apply(patches.JSON_PATCH, {"baz": "qux", "foo": ["bar"]}, operations)
    assert err.value.code == code and words in err.value.message


def test_strategic_merge_on_maps_merges_and_honours_directives():
    cm = {"metadata": {"name": "c", "labels": {"a": "1", "b": "2"}}, "data": {"x": "1", "y": "2"}}
    assert patches.apply(patches.STRATEGIC, cm, {"data": {"x": None, "z": "3"}})["data"] == {"y": "2", "z": "3"}
    assert patches.apply(patches.STRATEGIC, cm, {"data": {"$patch": "replace", "k": "v"}})["data"] == {"k": "v"}
    assert "labels" not in patches.apply(patches.STRATEGIC, cm, {"metadata": {"labels": {"$patch": "delete"}}})[
        "metadata"]
    assert patches.apply(patches.STRATEGIC, cm, {"data": {"$retainKeys": ["y"]}})["data"] == {"y": "2"}
    with pytest.raises(StatusError, match=r"\$deleteFromPrimitiveList/x: this strategic merge patch directive"):
        patches.apply(patches.STRATEGIC, cm, {"$deleteFromPrimitiveList/x": ["a"]})


def test_media_types_custom_resources_refuse_strategic_and_apply_with_415():
    with pytest.raises(StatusError) as strategic:
        patches.check_type(patches.STRATEGIC, patches.CUSTOM_TYPES)
    assert (strategic.value.code, strategic.value.reason) == (415, "UnsupportedMediaType")
    assert strategic.value.message == ("the body of the request was in an unknown format - accepted media types "
                                       "include: application/json-patch+json, application/merge-patch+json")
    with pytest.raises(StatusError, match="server-side apply") as apply:
        patches.check_type(patches.APPLY, patches.BUILTIN_TYPES)
    assert apply.value.code == 415
    patches.check_type(patches.media_type("application/merge-patch+json; charset=utf-8"), patches.CUSTOM_TYPES)


def _jobset(**spec) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "namespace": "default", "uid": "u1", "labels": {"a": "1"}},
            "spec": {"replicatedJobs": [{"name": "slice", "replicas": 2}], **spec}}


def test_jobset_transition_rules_only_bind_a_field_present_before_and_after():
    old = _jobset(failurePolicy={"maxRestarts": 1})
    with pytest.raises(StatusError) as err:
        updates.check_jobset_update(old, _jobset(failurePolicy={"maxRestarts": 2}))
    assert (err.value.code, err.value.details["causes"][0]["field"]) == (422, "spec.failurePolicy")
    assert err.value.message.endswith('spec.failurePolicy: Invalid value: "object": Value is immutable')
    updates.check_jobset_update(_jobset(), _jobset(failurePolicy={"maxRestarts": 2}))  # absent before: allowed
    updates.check_jobset_update(old, _jobset(failurePolicy={"maxRestarts": 1}, ttlSecondsAfterFinished=60))


def test_jobset_webhook_makes_replicated_jobs_immutable_with_403():
    changed = _jobset()
    changed["spec"]["replicatedJobs"][0]["replicas"] = 3
    with pytest.raises(StatusError) as err:
        updates.check_jobset_update(_jobset(), changed)
    assert (err.value.code, err.value.reason) == (403, "Forbidden")
    assert err.value.message.startswith('admission webhook "vjobset.kb.io" denied the request: spec.replicatedJobs: '
                                        "Invalid value: ")
    assert err.value.message.endswith("field is immutable")


def test_what_the_local_controller_cannot_do_is_refused_naming_the_field():
    relabelled = _jobset()
    relabelled["metadata"]["labels"] = {"a": "2"}
    updates.check_jobset_update(_jobset(), relabelled)
    for field, change in (("spec.suspend", lambda o: o["spec"].update(suspend=True)),
                          ('metadata.annotations["mtc.local/fault-plan"]',
                           lambda o: o["metadata"].update(annotations={"mtc.local/fault-plan": "[]"})),
                          ("metadata.finalizers", lambda o: o["metadata"].update(finalizers=["x"]))):
        new = _jobset()
        change(new)
        with pytest.raises(StatusError) as err:
            updates.check_jobset_update(_jobset(), new)
        assert err.value.code == 422 and err.value.details["causes"][0]["field"] == field


def test_identity_comes_from_the_stored_object():
    current = _jobset()
    current["metadata"].update(resourceVersion="7", creationTimestamp="2026-01-01T00:00:00Z")
    kept = updates.keep_identity(JOBSETS, current, {"metadata": {"name": "js", "creationTimestamp": "x", "labels": {}}})
    assert kept["metadata"]["creationTimestamp"] == "2026-01-01T00:00:00Z" and kept["metadata"]["uid"] == "u1"
    with pytest.raises(StatusError, match=r"does not match the name on the URL") as renamed:
        updates.keep_identity(JOBSETS, current, {"metadata": {"name": "other"}})
    assert renamed.value.code == 400


def test_a_suspended_jobset_may_change_its_pod_template_labels():
    def with_pod_labels(labels: dict | None, suspend: bool) -> dict:
        js = _jobset(suspend=suspend)
        js["spec"]["replicatedJobs"][0]["template"] = {"spec": {"template": {"spec": {"containers": []}}}}
        if labels is not None:
            js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {"labels": labels}
        return js

    updates.check_jobset_update(with_pod_labels(None, True), with_pod_labels({"q": "1"}, True))
    with pytest.raises(StatusError) as err:  # not suspended: the webhook refuses it
        updates.check_jobset_update(with_pod_labels(None, False), with_pod_labels({"q": "1"}, False))
    assert err.value.code == 403
