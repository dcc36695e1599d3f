"""Does the cluster's JobSet keep the failure policy the provider sends? (pure, over the served CRD)

The disruption rule of the rendered JobSet (core.definition.render.jobset_manifest) relies on
`failurePolicy.rules[].onJobFailureMessagePatterns`, which first appears in JobSet v0.10.0 (kubernetes-sigs/jobset
#1033). Older CRDs (v0.8.0 installed by xpk 1.3-1.8, v0.8.1 by xpk 1.9-1.12, v0.9.1) do not declare it and do not
preserve unknown fields, so the API server prunes it without an error (Kubernetes "Custom Resources": field
pruning): a bug's exit then matches the rule that restarts without counting, and maxRestarts never stops it. xpk
installs v0.10.1 from 1.13 (`src/xpk/core/cluster.py` JOBSET_VERSION).

The CRD is `GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io`; the field is
looked for in the served version's `openAPIV3Schema`. The CRD files carry no version of their own: the version
shown is the one an installer labels it with (`app.kubernetes.io/version`, Helm's `helm.sh/chart`), when present.
"""

from __future__ import annotations

from typing import Any, Mapping

from mtc_provider.core.basics.vocabulary import JOBSET
from mtc_provider.core.definition.cluster.readiness import Check

CRD_NAME = f"{JOBSET.plural}.{JOBSET.group}"
MIN_VERSION = "v0.10.0"
FIELD = "failurePolicy.rules[].onJobFailureMessagePatterns"
INSTALL = ("kubectl apply --server-side -f "
           "https://github.com/kubernetes-sigs/jobset/releases/download/v0.10.1/manifests.yaml")
WHY = ("the provider's disruption rule needs it (it first appears in JobSet v0.10.0; xpk 1.3-1.8 install v0.8.0, "
       "1.9-1.12 v0.8.1, 1.13 and later v0.10.1); an older JobSet drops it silently, so a failing run restarts "
       "without end")
_VERSION_KEYS = ("app.kubernetes.io/version", "helm.sh/chart", "jobset.x-k8s.io/version")


def installed_version(crd: Mapping[str, Any]) -> str | None:
    """The JobSet version an installer labelled or annotated the CRD with, if any."""
    meta = crd.get("metadata") or {}
    for source in (meta.get("labels") or {}, meta.get("annotations") or {}):
        for key in _VERSION_KEYS:
            if source.get(key):
                return str(source[key])
    return None


def _served_schema(crd: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for version in (crd.get("spec") or {}).get("versions") or []:
        if version.get("name") == JOBSET.version and version.get("served", True):
            return (version.get("schema") or {}).get("openAPIV3Schema") or {}
    return None


def keeps_message_patterns(crd: Mapping[str, Any]) -> bool:
    """The served version's schema declares onJobFailureMessagePatterns on a failure policy rule."""
    node: Any = _served_schema(crd)
    for key in ("spec", "failurePolicy", "rules"):
        node = ((node or {}).get("properties") or {}).get(key)
    rule = (node or {}).get("items") or {}
    return "onJobFailureMessagePatterns" in (rule.get("properties") or {})


def jobset_crd_check(crd: Mapping[str, Any] | None, unreadable: str = "") -> Check:
    """One readiness check: JobSet installed, serving v1alpha2, and new enough to keep the provider's failure policy.

    `crd`: the CRD as read (None: not found); `unreadable`: why it could not be read (e.g. a 403)."""
    expected = f"JobSet {MIN_VERSION} or later: {CRD_NAME} {JOBSET.version} declaring {FIELD} ({WHY})"
    if unreadable:
        return Check("jobset_version", False, f"CRD {CRD_NAME} not readable: {unreadable}", expected,
                     f"let the connection's identity get customresourcedefinitions ({CRD_NAME}), or check by hand: "
                     f"kubectl get crd {CRD_NAME} -o yaml | grep onJobFailureMessagePatterns; {INSTALL}")
    if crd is None:
        return Check("jobset_version", False, "JobSet not installed (no CRD " + CRD_NAME + ")", expected, INSTALL)
    version = installed_version(crd)
    found = f"JobSet {version}" if version else "JobSet (its CRD carries no version label)"
    if _served_schema(crd) is None:
        return Check("jobset_version", False, f"{found}: {JOBSET.version} not served", expected, INSTALL)
    if not keeps_message_patterns(crd):
        return Check("jobset_version", False,
                     f"{found}: older than {MIN_VERSION}, its {JOBSET.version} schema has no {FIELD} (pruned "
                     "silently)", expected, f"upgrade JobSet: {INSTALL}")
    return Check("jobset_version", True, f"{found}: {FIELD} served", expected, "")
