"""The GKE target: a GKE cluster, named within a project, reached with a Google Cloud connection (whose project
`resolve_project` reads when the target names none)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar, Sequence

from mtc_provider.core.basics.errors import SpecError


@dataclass
class GkeTarget:
    """A GKE cluster. `project_id` may be empty: the project of the `gcp_conn_id` connection is used
    (`resolve_project`). `use_dns_endpoint` reaches the control plane through its DNS-based endpoint."""

    project_id: str | None
    location: str
    cluster_name: str
    gcp_conn_id: str = "google_cloud_default"
    impersonation_chain: str | Sequence[str] | None = None
    use_internal_ip: bool = False
    # Where the workload's JobSets live; the google provider resolves endpoint and CA once from the cluster.
    namespace: str = "default"
    use_dns_endpoint: bool = False

    template_fields: Sequence[str] = field(
        default=("project_id", "location", "cluster_name", "namespace", "gcp_conn_id", "impersonation_chain"),
        repr=False, compare=False,
    )
    kind: str = field(default="gke", init=False)
    project_scoped: ClassVar[bool] = True

    def __post_init__(self) -> None:
        for name in ("location", "cluster_name"):
            if not getattr(self, name):
                raise SpecError(f"target.{name}", getattr(self, name), "a non-empty string")
        if self.use_internal_ip and self.use_dns_endpoint:
            raise SpecError("target.use_dns_endpoint", self.use_dns_endpoint,
                            "False when use_internal_ip is True (one control-plane endpoint)")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("template_fields")
        return data


def resolve_project(target: Any) -> Any:
    """The target with its project: its own, else the connection's (as every Google operator does)."""
    if target.project_id:
        return target
    from airflow.providers.google.common.hooks.base_google import GoogleBaseHook

    hook = GoogleBaseHook(gcp_conn_id=target.gcp_conn_id, impersonation_chain=target.impersonation_chain)
    project = hook._get_field("project")  # the connection's "Project Id" field
    if not project:
        try:
            project = hook.project_id  # from the credentials (a key file's project, ADC)
        except Exception:  # noqa: BLE001 - no credentials: the error below names what is missing
            project = None
    if not project:
        raise SpecError("target.project_id", target.project_id,
                        f"a project id, or a connection {target.gcp_conn_id!r} that names a project")
    return replace(target, project_id=project)
