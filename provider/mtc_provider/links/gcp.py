"""Extra links to the cluster and the bucket in the Cloud Console (values persisted in XCom at run time)."""

from __future__ import annotations

from typing import Any, ClassVar

from airflow.sdk import BaseOperatorLink
from mtc_provider.links import stored_value

CONSOLE = "https://console.cloud.google.com"


class _ConsoleLink(BaseOperatorLink):
    key: ClassVar[str]
    template: ClassVar[str]

    @classmethod
    def persist(cls, context: Any, **values: str) -> None:
        context["ti"].xcom_push(key=cls.key, value=values)

    @classmethod
    def format(cls, **values: str) -> str:
        return CONSOLE + cls.template.format(**values)

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        values = stored_value(self.key, ti_key)
        return self.format(**values) if values else ""


class GkeClusterLink(_ConsoleLink):
    name = "GKE Cluster"
    key = "mtc_gke_cluster"
    template = "/kubernetes/clusters/details/{location}/{cluster_name}/details?project={project_id}"


class GcsBucketLink(_ConsoleLink):
    name = "Checkpoint Bucket"
    key = "mtc_gcs_bucket"
    template = "/storage/browser/{bucket};tab=objects?project={project_id}"
