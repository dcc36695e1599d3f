"""What an update (a PATCH) may change, as the API server, the JobSet CRD and JobSet's webhook decide it (pure).

Every resource (https://kubernetes.io/docs/reference/using-api/api-concepts/ and ObjectMeta's field docs,
https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/object-meta/): the name and the namespace
on the URL win (a different one in the body is 400 BadRequest); metadata.uid is immutable (422); the system fields
(creationTimestamp, generation, resourceVersion, deletionTimestamp, ...) are the server's and keep their values.

JobSets, in the order the API server runs the checks (schema and CEL first, then the validating webhook):
- the CRD's transition rules `self == oldSelf` ("Value is immutable") on spec.failurePolicy, spec.network,
  spec.startupPolicy, spec.successPolicy, spec.volumeClaimPolicies and spec.replicatedJobs[*].dependsOn: 422
  Invalid `<field>: Invalid value: "object": Value is immutable`; a transition rule runs only when the field is
  in both the old and the new object
  (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#transition-rules);
- JobSet's webhook (kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go, ValidateUpdate): spec.replicatedJobs
  and spec.managedBy are immutable -- except, while the JobSet is or becomes suspended, the pod template's labels,
  annotations, nodeSelector, tolerations and schedulingGates -- answered 403 Forbidden
  `admission webhook "vjobset.kb.io" denied the request: spec.replicatedJobs: Invalid value: ...: field is immutable`;
- what this cluster's JobSet controller cannot carry out is refused (422, FieldValueForbidden) rather than
  pretended: a change of spec.suspend (it does not suspend), of the local fault plan annotation (read once, when
  the JobSet is created) or of the log folder annotation (the server's), and metadata changes other than labels
  and annotations.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from mtc_local.cluster import errors
from mtc_local.cluster.resources import JOBSETS, Resource
from mtc_local.runner.manifest import FAULT_PLAN_ANNOTATION, LOG_DIR_ANNOTATION

SYSTEM_FIELDS = ("uid", "creationTimestamp", "generation", "resourceVersion", "deletionTimestamp",
                 "deletionGracePeriodSeconds", "managedFields", "selfLink")
JOBSET_WEBHOOK = "vjobset.kb.io"
CEL_IMMUTABLE = ("failurePolicy", "network", "startupPolicy", "successPolicy", "volumeClaimPolicies")
WEBHOOK_IMMUTABLE = ("replicatedJobs", "managedBy")
# Mutable in a suspended JobSet (for Kueue): pod template metadata and these pod spec fields.
SUSPENDED_MUTABLE_POD_FIELDS = ("nodeSelector", "tolerations", "schedulingGates")
SERVER_ANNOTATIONS = (FAULT_PLAN_ANNOTATION, LOG_DIR_ANNOTATION)
USER_METADATA = ("labels", "annotations")


def _cause(field: str, message: str, reason: str = "FieldValueInvalid") -> dict[str, str]:
    return {"reason": reason, "field": field, "message": message}


def keep_identity(resource: Resource, current: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`new` with the stored identity and system fields; 400 / 422 for a name, namespace or uid it tries to change."""
    out = copy.deepcopy(new)
    old_meta, meta = current["metadata"], out.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise errors.bad_request("metadata: Invalid value: must be an object")
    name = old_meta["name"]
    if meta.get("name", name) != name:
        raise errors.bad_request(f"the name of the object ({meta.get('name')}) does not match the name on the URL "
                                 f"({name})")
    if meta.get("namespace", old_meta.get("namespace")) != old_meta.get("namespace"):
        raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the "
                                 "request")
    if meta.get("uid", old_meta.get("uid")) != old_meta.get("uid"):
        raise errors.invalid(resource, name, [_cause("metadata.uid", f"Invalid value: {json.dumps(meta['uid'])}: "
                                                                     "field is immutable")])
    meta["name"] = name
    if "namespace" in old_meta:
        meta["namespace"] = old_meta["namespace"]
    for key in SYSTEM_FIELDS:
        if key in old_meta:
            meta[key] = old_meta[key]
        else:
            meta.pop(key, None)
    for key in ("apiVersion", "kind"):
        out[key] = current.get(key, out.get(key))
    return out


def _present_in_both(old: dict[str, Any], new: dict[str, Any], key: str) -> bool:
    return key in old and key in new


def _cel_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(type(value), "number")


def _munged_replicated_jobs(old_spec: dict[str, Any], new_spec: dict[str, Any]) -> list[Any]:
    """The new replicatedJobs with what a suspended JobSet may change set back to the old values (the webhook's
    mungedSpec)."""
    munged = copy.deepcopy(new_spec.get("replicatedJobs"))
    suspended = bool(old_spec.get("suspend")) or bool(new_spec.get("suspend"))
    old_jobs = old_spec.get("replicatedJobs")
    if not suspended or not isinstance(munged, list) or not isinstance(old_jobs, list):
        return munged
    for new_job, old_job in zip(munged, old_jobs):
        try:
            new_pod = new_job["template"]["spec"]["template"]
            old_pod = old_job["template"]["spec"]["template"]
        except (KeyError, TypeError):
            continue
        _copy_keys(old_pod, new_pod, "metadata", ("labels", "annotations"))
        _copy_keys(old_pod, new_pod, "spec", SUSPENDED_MUTABLE_POD_FIELDS)
    return munged


def _semantic(value: Any) -> Any:
    """The value as Go's apiequality.Semantic.DeepEqual compares decoded structs: an empty or null map, list or
    nested object is the same as an absent one."""
    if isinstance(value, dict):
        kept = {k: _semantic(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_semantic(v) for v in value]
    return value


def _copy_keys(old: dict[str, Any], new: dict[str, Any], section: str, keys: tuple[str, ...]) -> None:
    """new[section][key] = old[section][key] for each key (absent where absent), creating no empty section."""
    source = old.get(section) if isinstance(old.get(section), dict) else {}
    if not isinstance(new.get(section), dict):
        if not any(key in source for key in keys):
            return
        new[section] = {}
    for key in keys:
        if key in source:
            new[section][key] = copy.deepcopy(source[key])
        else:
            new[section].pop(key, None)


def check_jobset_update(current: dict[str, Any], new: dict[str, Any]) -> None:
    """422 (CRD transition rules, this controller's limits) or 403 (JobSet's webhook) for a change JobSet refuses."""
    name = current["metadata"]["name"]
    old_spec, spec = current.get("spec") or {}, new.get("spec") or {}
    causes = [_cause(f"spec.{key}", f'Invalid value: "{_cel_type(spec[key])}": Value is immutable')
              for key in CEL_IMMUTABLE if _present_in_both(old_spec, spec, key) and old_spec[key] != spec[key]]
    old_jobs, jobs = old_spec.get("replicatedJobs"), spec.get("replicatedJobs")
    if isinstance(old_jobs, list) and isinstance(jobs, list):
        for i, (old_job, job) in enumerate(zip(old_jobs, jobs)):
            if (isinstance(old_job, dict) and isinstance(job, dict) and _present_in_both(old_job, job, "dependsOn")
                    and old_job["dependsOn"] != job["dependsOn"]):
                causes.append(_cause(f"spec.replicatedJobs[{i}].dependsOn",
                                     'Invalid value: "array": Value is immutable'))
    if causes:
        raise errors.invalid(JOBSETS, name, causes)
    denied = []
    if _semantic(_munged_replicated_jobs(old_spec, spec)) != _semantic(old_jobs):
        denied.append(f"spec.replicatedJobs: Invalid value: {json.dumps(jobs, separators=(',', ':'))}: "
                      "field is immutable")
    if spec.get("managedBy") != old_spec.get("managedBy"):
        denied.append(f"spec.managedBy: Invalid value: {json.dumps(spec.get('managedBy'))}: field is immutable")
    if denied:
        raise errors.forbidden_by_webhook(JOBSET_WEBHOOK, denied[0] if len(denied) == 1
                                          else "[" + ", ".join(denied) + "]")
    _check_local_controller(name, current, new)


def _check_local_controller(name: str, current: dict[str, Any], new: dict[str, Any]) -> None:
    causes = []
    if bool((current.get("spec") or {}).get("suspend")) != bool((new.get("spec") or {}).get("suspend")):
        causes.append(_cause("spec.suspend", "Forbidden: the local cluster's JobSet controller does not suspend or "
                                             "resume JobSets; delete the JobSet and create it again",
                             "FieldValueForbidden"))
    old_meta, meta = current["metadata"], new["metadata"]
    old_notes, notes = old_meta.get("annotations") or {}, meta.get("annotations") or {}
    for key in SERVER_ANNOTATIONS:
        if old_notes.get(key) != notes.get(key):
            causes.append(_cause(f'metadata.annotations["{key}"]',
                                 "Forbidden: read once, when the JobSet is created; delete the JobSet and create it "
                                 "again to change it", "FieldValueForbidden"))
    for key in sorted(set(old_meta) | set(meta)):
        if key in USER_METADATA or key in SYSTEM_FIELDS or key in ("name", "namespace"):
            continue
        if old_meta.get(key) != meta.get(key):
            causes.append(_cause(f"metadata.{key}", "Forbidden: the local cluster changes only metadata.labels and "
                                                    "metadata.annotations of a JobSet", "FieldValueForbidden"))
    if causes:
        raise errors.invalid(JOBSETS, name, causes)
