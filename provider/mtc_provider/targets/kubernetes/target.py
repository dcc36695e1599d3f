"""The kubernetes target: any cluster with JobSet installed, through an Airflow Kubernetes connection."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Sequence

from mtc_provider.core.basics.errors import SpecError


@dataclass
class KubernetesTarget:
    """Any Kubernetes cluster with JobSet installed, reached through an Airflow Kubernetes connection (the
    cncf.kubernetes provider's: a kubeconfig, in-cluster, or a context). Its buckets and checkpoints are on GCS,
    through the Google connection. Node pools and GKE addons are managed elsewhere (a gke target, or gcloud)."""

    kubernetes_conn_id: str = "kubernetes_default"
    namespace: str = "default"
    gcp_conn_id: str = "google_cloud_default"
    impersonation_chain: str | Sequence[str] | None = None
    project_id: str | None = None  # for creating buckets; empty: the Google connection's project
    location: str = ""  # a new bucket's default location; empty: the bucket operator's bucket_location is required

    template_fields: Sequence[str] = field(
        default=("kubernetes_conn_id", "namespace", "gcp_conn_id", "impersonation_chain", "project_id", "location"),
        repr=False, compare=False,
    )
    kind: str = field(default="kubernetes", init=False)
    project_scoped: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if not self.kubernetes_conn_id:
            raise SpecError("target.kubernetes_conn_id", self.kubernetes_conn_id, "an Airflow Kubernetes connection id")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("template_fields")
        return data
