"""Extra links for a training JobSet: the workload in the Cloud Console, its pods' logs, the checkpoint folder.

Airflow 3's API server shows a link by reading the URL stored in XCom under the link's `xcom_key`,
so the launch operator stores finished URLs at run time (`persist_links`). On the local target there
is no console: those links are simply not stored (no link shown, never a broken one), and the
checkpoint folder is served over http by the provider's plugin inside the api-server (links/run_view.py):
Airflow 3.3's UI draws no file:// link.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, ClassVar
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink
from mtc_provider.links import stored_value

from mtc_provider.core.basics.vocabulary import JOBSET
from mtc_provider.target import Target

CONSOLE = "https://console.cloud.google.com"


def workload_url(project_id: str, location: str, cluster: str, namespace: str, name: str) -> str:
    # JobSet is a custom resource: the console shows it in the object browser.
    return (f"{CONSOLE}/kubernetes/object/{JOBSET.group}/{JOBSET.plural}/{location}/{cluster}/{namespace}/{name}"
            f"/overview?apiVersion={JOBSET.version}&project={project_id}")


# Before the attempt's start (clock skew between the worker and the nodes) and after its end (log lines of the
# pods' shutdown, written after the operator saw the end).
LOGS_BEFORE_START_S = 60.0
LOGS_AFTER_END_S = 300.0
# A running attempt's end is not known when the link is stored (Airflow 3 shows the URL stored in XCom): the range
# covers a day, and the link is stored again with the real end when the attempt ends.
RUNNING_SPAN_S = 24 * 3600.0


def logging_query(cluster: str, namespace: str, name: str, replicated_job: str | None = None,
                  leader_only: bool = True) -> str:
    """The attempt's container logs; by default its leader pod's only: job 0 of the replicated job, completion
    index 0 (JobSet names that pod `<jobset>-<replicatedJob>-0-0-<suffix>`, and labels it so; the JobSet CRD's
    podTemplate docs, and https://kubernetes.io/docs/reference/labels-annotations-taints/#batch-kubernetes-io-job-completion-index).
    Cloud Logging turns pod label keys' '.' into '_' under labels."k8s-pod/...".
    """
    lines = ['resource.type="k8s_container"', f'resource.labels.cluster_name="{cluster}"',
             f'resource.labels.namespace_name="{namespace}"',
             f'labels."k8s-pod/jobset_sigs_k8s_io/jobset-name"="{name}"']
    if leader_only:
        if replicated_job:
            lines.append(f'labels."k8s-pod/jobset_sigs_k8s_io/replicatedjob-name"="{replicated_job}"')
        lines += ['labels."k8s-pod/jobset_sigs_k8s_io/job-index"="0"',
                  'labels."k8s-pod/batch_kubernetes_io/job-completion-index"="0"']
    return "\n".join(lines)


def _utc(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def time_range(start: float, end: float | None) -> str:
    """The Logs Explorer's `timeRange` value: an ISO 8601 interval START/END in UTC (its URL's `;timeRange=`)."""
    until = end + LOGS_AFTER_END_S if end is not None else start + RUNNING_SPAN_S
    return f"{_utc(start - LOGS_BEFORE_START_S)}/{_utc(until)}"


def logs_url(project_id: str, cluster: str, namespace: str, name: str, start: float | None = None,
             end: float | None = None, replicated_job: str | None = None, leader_only: bool = True) -> str:
    """A Logs Explorer URL: `/logs/query;query=<filter>;timeRange=<start>/<end>?project=<id>` (the filter and
    the interval percent-encoded), scoped to the attempt's leader pod and, when `start` is known, its time range."""
    query = quote(logging_query(cluster, namespace, name, replicated_job, leader_only), safe="")
    scope = f";timeRange={quote(time_range(start, end), safe='')}" if start is not None else ""
    return f"{CONSOLE}/logs/query;query={query}{scope}?project={project_id}"


def checkpoints_url(checkpoint_dir: str, project_id: str | None = None, run: tuple[str, str] | None = None) -> str:
    """The folder in the Cloud Console for gs://; a local folder through the run view plugin when the run
    (dag_id, run_id) is known, else a file:// URL (stored for the REST API; the UI does not draw it)."""
    if checkpoint_dir.startswith("gs://"):
        path = checkpoint_dir[len("gs://"):].rstrip("/")
        return f"{CONSOLE}/storage/browser/{path}" + (f"?project={project_id}" if project_id else "")
    if run is not None:
        from mtc_provider.links.run_view import folder_url

        return folder_url(*run)
    return "file://" + quote(checkpoint_dir)


def run_of(context: Any) -> tuple[str, str] | None:
    """(dag_id, run_id) of the task instance in `context`, or None outside a DAG run."""
    ti = context.get("ti") if hasattr(context, "get") else None
    dag_id, run_id = getattr(ti, "dag_id", None), getattr(ti, "run_id", None)
    return (dag_id, run_id) if isinstance(dag_id, str) and isinstance(run_id, str) else None


class _StoredUrlLink(BaseOperatorLink):
    name: ClassVar[str]
    key: ClassVar[str]

    @property
    def xcom_key(self) -> str:
        return self.key

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        value = stored_value(self.key, ti_key)
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


def link_urls(target: Target, namespace: str, name: str, checkpoint_dir: str, start: float | None = None,
              end: float | None = None, replicated_job: str | None = None,
              run: tuple[str, str] | None = None) -> dict[str, str]:
    """The URLs to store, keyed by XCom key; console links only exist on targets with a Console scope. The logs
    link covers the attempt's leader pod from `start` to `end` (epoch seconds; end None: still running)."""
    from mtc_provider.targets import backend_for

    # An empty value means "no link" to Airflow's UI; storing it avoids XCom-not-found noise on the local target.
    urls = {JobSetWorkloadLink.key: "", JobSetLogsLink.key: ""}
    scope = backend_for(target).console
    if scope is not None:
        urls[JobSetWorkloadLink.key] = workload_url(scope.project_id, scope.location, scope.cluster_name,
                                                    namespace, name)
        urls[JobSetLogsLink.key] = logs_url(scope.project_id, scope.cluster_name, namespace, name, start, end,
                                            replicated_job)
    urls[CheckpointFolderLink.key] = checkpoints_url(checkpoint_dir, scope.project_id if scope else None, run)
    return urls


def created_at(obj: dict[str, Any], default: float) -> float:
    """The API server's creationTimestamp of an object (RFC 3339, UTC) in epoch seconds; `default` without one."""
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return default
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return default


def persist_links(context: Any, target: Target, namespace: str, name: str, checkpoint_dir: str,
                  start: float | None = None, end: float | None = None,
                  replicated_job: str | None = None) -> dict[str, str]:
    urls = link_urls(target, namespace, name, checkpoint_dir, start, end, replicated_job, run_of(context))
    for key, url in urls.items():
        context["ti"].xcom_push(key=key, value=url)
    return urls
