"""Extra links for a training JobSet: the workload in the Cloud Console, its pods' logs, the checkpoint folder.

Airflow 3's API server shows a link by reading the URL stored in XCom under the link's `xcom_key`,
so the launch operator stores finished URLs at run time (`persist_links`). On the local target there
is no console: those links are simply not stored (no link shown, never a broken one), and the
checkpoint folder is a file:// URL.
"""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

from mtc_provider.core.vocabulary import JOBSET
from mtc_provider.target import Target

CONSOLE = "https://console.cloud.google.com"


def workload_url(project_id: str, location: str, cluster: str, namespace: str, name: str) -> str:
    # JobSet is a custom resource: the console shows it in the object browser.
    return (f"{CONSOLE}/kubernetes/object/{JOBSET.group}/{JOBSET.plural}/{location}/{cluster}/{namespace}/{name}"
            f"/overview?apiVersion={JOBSET.version}&project={project_id}")


def logging_query(cluster: str, namespace: str, name: str) -> str:
    # Cloud Logging turns pod label keys' '.' into '_' under labels."k8s-pod/...".
    return "\n".join((
        'resource.type="k8s_container"',
        f'resource.labels.cluster_name="{cluster}"',
        f'resource.labels.namespace_name="{namespace}"',
        f'labels."k8s-pod/jobset_sigs_k8s_io/jobset-name"="{name}"',
    ))


def logs_url(project_id: str, cluster: str, namespace: str, name: str) -> str:
    return f"{CONSOLE}/logs/query;query={quote(logging_query(cluster, namespace, name), safe='')}?project={project_id}"


def checkpoints_url(checkpoint_dir: str, project_id: str | None = None) -> str:
    if checkpoint_dir.startswith("gs://"):
        path = checkpoint_dir[len("gs://"):].rstrip("/")
        return f"{CONSOLE}/storage/browser/{path}" + (f"?project={project_id}" if project_id else "")
    return "file://" + quote(checkpoint_dir)


class _StoredUrlLink(BaseOperatorLink):
    name: ClassVar[str]
    key: ClassVar[str]

    @property
    def xcom_key(self) -> str:
        return self.key

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        value = XCom.get_value(key=self.key, ti_key=ti_key)
        return value if isinstance(value, str) else ""


class JobSetWorkloadLink(_StoredUrlLink):
    name = "JobSet (Cloud Console)"
    key = "mtc_jobset_workload_url"


class JobSetLogsLink(_StoredUrlLink):
    name = "JobSet pod logs"
    key = "mtc_jobset_logs_url"


class CheckpointFolderLink(_StoredUrlLink):
    name = "Checkpoint folder"
    key = "mtc_checkpoint_folder_url"


JOBSET_LINKS = (JobSetWorkloadLink(), JobSetLogsLink(), CheckpointFolderLink())


def link_urls(target: Target, namespace: str, name: str, checkpoint_dir: str) -> dict[str, str]:
    """The URLs to store, keyed by XCom key; console links only exist on targets with a Console scope."""
    from mtc_provider.adapters.targets import backend_for

    # An empty value means "no link" to Airflow's UI; storing it avoids XCom-not-found noise on the local target.
    urls = {JobSetWorkloadLink.key: "", JobSetLogsLink.key: ""}
    scope = backend_for(target).console
    if scope is not None:
        urls[JobSetWorkloadLink.key] = workload_url(scope.project_id, scope.location, scope.cluster_name,
                                                    namespace, name)
        urls[JobSetLogsLink.key] = logs_url(scope.project_id, scope.cluster_name, namespace, name)
    urls[CheckpointFolderLink.key] = checkpoints_url(checkpoint_dir, scope.project_id if scope else None)
    return urls


def persist_links(context: Any, target: Target, namespace: str, name: str, checkpoint_dir: str) -> dict[str, str]:
    urls = link_urls(target, namespace, name, checkpoint_dir)
    for key, url in urls.items():
        context["ti"].xcom_push(key=key, value=url)
    return urls
