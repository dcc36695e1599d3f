"""Where a run goes: a target object (or its dict form), one per kind (targets/<kind>/).

One parameter object replaces the seven connection arguments every operator would otherwise repeat. Every target
class declares `template_fields`, so Airflow renders their fields when an operator templates the object (Airflow
renders nested objects that have `template_fields`). The classes are the registry's (targets/registry.py): GkeTarget
and KubernetesTarget are this distribution's; LocalTarget is the rehearsal's (mtc-local, the `local` extra) and is
reached here by name when it is installed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol, Sequence

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.targets.gke.target import GkeTarget, resolve_project
from mtc_provider.targets.kubernetes.target import KubernetesTarget
from mtc_provider.targets.registry import DEFAULT_KIND, kind_of, target_from_dict  # noqa: F401 - the public names


class Target(Protocol):
    """What every target is: data with a kind, a namespace, its fields as a dict."""

    kind: str
    namespace: str

    def to_dict(self) -> dict[str, Any]: ...


def default_local_home() -> str:
    return os.environ.get("MTC_LOCAL_HOME") or str(Path.home() / ".mtc" / "local")


def __getattr__(name: str) -> Any:
    """`from mtc_provider.target import LocalTarget`: the local kind's class, from mtc-local when installed (else the
    error names the extra that installs it)."""
    if name == "LocalTarget":
        return kind_of("local").target_class
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The Google provider's GKE operators' parameter names (GKEStartJobOperator & co.), accepted on every operator and
# sensor that reaches GKE, beside `target`. Also their template fields: every one is templated.
GOOGLE_PARAMETERS = ("gcp_conn_id", "impersonation_chain", "project_id", "location", "cluster_name", "use_dns_endpoint")
# The parameters that name a cluster: given on the operator, they build (or must agree with) a GKE target.
CLUSTER_PARAMETERS = ("location", "cluster_name")


def google_parameters(task: Any) -> dict[str, Any]:
    """The GOOGLE_PARAMETERS of an operator or sensor (each stores them under their own names)."""
    return {name: getattr(task, name, None) for name in GOOGLE_PARAMETERS}


def _flag(name: str, value: Any) -> bool | None:
    """A bool, or its rendered-template text ("True", "false"); None or "": not given."""
    if value in (None, ""):
        return None
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise SpecError(name, value, "True or False")


def with_google(target: Target | dict[str, Any] | None, gcp_conn_id: str | None = None,
                impersonation_chain: str | Sequence[str] | None = None, project_id: str | None = None,
                location: str | None = None, cluster_name: str | None = None, use_dns_endpoint: Any = None,
                kubernetes_conn_id: str | None = None) -> Target:
    """The target an operator runs against, from its `target` and its Google-style parameters. The one place every
    operator and sensor applies them. Which one wins:

    - `location` + `cluster_name` without `target`: they build a GKE target (with project_id, gcp_conn_id,
      impersonation_chain, use_dns_endpoint), as a GKEStartJobOperator user writes it;
    - with a GKE `target` they must agree with its fields (equal values are fine); a different value is an error
      naming both; with a local or Kubernetes target, or with `kubernetes_conn_id`, they are an error;
    - gcp_conn_id, impersonation_chain, project_id and use_dns_endpoint given on the operator take precedence over
      the target's (the target stays the default).

    Then the project is resolved (its own, else the connection's). Errors come before any call.
    """
    from dataclasses import replace

    dns = _flag("use_dns_endpoint", use_dns_endpoint)
    cluster = {k: v for k, v in (("location", location), ("cluster_name", cluster_name)) if v not in (None, "")}
    if cluster and kubernetes_conn_id:
        key = next(iter(cluster))
        raise SpecError(key, cluster[key], f"empty when kubernetes_conn_id={kubernetes_conn_id!r} is given "
                                           "(one cluster: a GKE cluster by name, or a Kubernetes connection)")
    if cluster and target is None:
        for key in CLUSTER_PARAMETERS:
            if key not in cluster:
                raise SpecError(key, None, "a value: location and cluster_name name a GKE cluster together "
                                           "(or give a target)")
        resolved: Target = GkeTarget(project_id=project_id or None, location=cluster["location"],
                                     cluster_name=cluster["cluster_name"],
                                     gcp_conn_id=gcp_conn_id or "google_cloud_default",
                                     impersonation_chain=impersonation_chain or None, use_dns_endpoint=bool(dns))
        return _resolved(resolved)
    resolved = target_from_dict(target)
    if cluster:
        if not all(hasattr(resolved, key) for key in CLUSTER_PARAMETERS):  # the target names no cluster by them
            key = next(iter(cluster))
            raise SpecError(key, cluster[key], f"empty with a {resolved.kind} target: give either "
                                               "location/cluster_name or target, not both")
        for key, value in cluster.items():
            if getattr(resolved, key) != value:
                raise SpecError(key, value, f"the target's own {key} ({getattr(resolved, key)!r}), or leave one of "
                                            f"them out: {key}={value!r} and target.{key}="
                                            f"{getattr(resolved, key)!r} name different clusters")
    if dns is not None and not hasattr(resolved, "use_dns_endpoint"):
        if dns:
            raise SpecError("use_dns_endpoint", use_dns_endpoint, f"False or None with a {resolved.kind} target "
                                                                  "(only a GKE cluster has a DNS endpoint)")
        dns = None
    if not hasattr(resolved, "gcp_conn_id"):  # the local target has no Google connection
        return resolved
    overrides = {k: v for k, v in (("gcp_conn_id", gcp_conn_id), ("impersonation_chain", impersonation_chain),
                                   ("project_id", project_id), ("use_dns_endpoint", dns)) if v not in (None, "")}
    if overrides:
        resolved = replace(resolved, **overrides)
    return _resolved(resolved)


def _resolved(target: Target) -> Target:
    # A GKE cluster is named within a project; a Kubernetes target needs one only to create a bucket.
    # (dataclasses.replace re-runs __post_init__: use_dns_endpoint with use_internal_ip is refused there.)
    return resolve_project(target) if getattr(target, "project_scoped", False) else target
