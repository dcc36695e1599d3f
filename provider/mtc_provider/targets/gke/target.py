"""The GKE target: a GKE cluster, named within a project, reached with a Google Cloud connection."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
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
