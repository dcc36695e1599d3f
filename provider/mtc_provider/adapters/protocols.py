"""The small Protocols the Airflow glue talks to. Each has a GKE/GCS implementation and a local one.

Objects cross these boundaries as plain dicts in the Kubernetes JSON shape (a JobSet is exactly what
`kubectl get jobset -o json` returns), so the core's one status evaluator serves every target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator, Protocol, runtime_checkable


class ApiError(Exception):
    """A request the API answered with an error status. `status` is the HTTP code (409, 404, ...)."""

    def __init__(self, status: int, message: str = "", reason: str = "") -> None:
        self.status = status
        self.reason = reason
        super().__init__(f"HTTP {status} {reason}: {message}".strip())

    @property
    def code(self) -> int | None:
        """The status under the name google.api_core's errors use (None when no HTTP answer came), so code that
        describes a client library's error describes ours alike."""
        return self.status if self.status > 0 else None


class NotFound(ApiError):
    def __init__(self, message: str = "") -> None:
        super().__init__(404, message, "NotFound")


class AlreadyExists(ApiError):
    def __init__(self, message: str = "") -> None:
        super().__init__(409, message, "AlreadyExists")


@dataclass(frozen=True)
class WatchEvent:
    """One event of a JobSet watch: type is ADDED, MODIFIED or DELETED; obj is the JobSet dict."""

    type: str
    obj: dict[str, Any]


@runtime_checkable
class JobSetApi(Protocol):
    """Create, read, delete and watch JobSets (namespaced, jobset.x-k8s.io/v1alpha2)."""

    def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create the JobSet; raise AlreadyExists when the name is taken."""

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        """Return the JobSet; raise NotFound."""

    def list(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """JobSets whose labels match the selector (`k=v,k2=v2`)."""

    def delete(self, namespace: str, name: str, reason: str = ...) -> None:
        """Delete the JobSet and its pods (foreground propagation); missing is not an error. `reason`: one of
        core.basics.vocabulary.DELETE_REASONS, sent with the request for the cluster's audit."""


@runtime_checkable
class AsyncJobSetApi(Protocol):
    """The trigger's side: async reads and a watch, with no state that cannot be rebuilt from primitives."""

    async def get(self, namespace: str, name: str) -> dict[str, Any]: ...

    def watch(self, namespace: str, name: str, resource_version: str | None = None) -> AsyncIterator[WatchEvent]:
        """Yield events for the one JobSet; the implementation relists on 410 Gone and falls back to polling."""

    async def delete(self, namespace: str, name: str, reason: str = ...) -> None: ...


@dataclass(frozen=True)
class CheckpointInfo:
    """A finalized persistent checkpoint: its step, where it lives, and when it was committed (unix s)."""

    step: int
    path: str
    commit_time: float | None = None


@runtime_checkable
class CheckpointStore(Protocol):
    """Lists a run's persistent checkpoint directory (<base>/<run_name>/checkpoints) on GCS or locally."""

    def finalized_steps(self, checkpoint_dir: str) -> list[CheckpointInfo]:
        """Finalized steps (commit_success.txt present), ascending; in-flight and uncommitted never count."""

    def finalized(self, checkpoint_dir: str, after: int | None = None) -> list[CheckpointInfo]:
        """The finalized steps newer than `after` (all when None), ascending: what list_newest reads."""


@runtime_checkable
class RunLockApi(Protocol):
    """One lock object per run name (a ConfigMap on Kubernetes, a file locally), so two writers never start.

    `create_lock` is create-if-absent (AlreadyExists when held); `replace_lock` is compare-and-set on
    metadata.resourceVersion (ApiError 409 when someone else changed it).
    """

    def create_lock(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def get_lock(self, namespace: str, name: str) -> dict[str, Any]: ...

    def replace_lock(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def delete_lock(self, namespace: str, name: str) -> None: ...


@dataclass(frozen=True)
class ConsoleScope:
    """Where a target's objects show in the Cloud Console (None on targets that have no console)."""

    project_id: str
    location: str
    cluster_name: str


@runtime_checkable
class ClusterControl(Protocol):
    """A target's cluster: its readiness, a Kubernetes client for cluster-scoped objects, and its control plane."""

    def readiness(self, slices: dict[str, Any], sizing: dict[str, Any] | None,
                  checkpoint_configuration_name: str | None, bucket_name: str | None = None,
                  capacity: tuple[str, str] = ("on-demand", "")) -> list[Any]:
        """The core's readiness checks (core.definition.cluster.readiness.Check) for these slices; blocking. A named
        CheckpointConfiguration must serve the slices (and `bucket_name`, and the ramdisk of `sizing`, when given)."""

    def kubernetes_client_factory(self) -> Any:
        """A callable returning a kubernetes.client.ApiClient (the CheckpointConfiguration is applied through it)."""

    def provided_by_target(self, step: str, total_hosts: int) -> str | None:
        """Why a control-plane step (`enable_checkpointing`, `tpu_node_pools`) has nothing to do on this target,
        or None when it runs through `control_plane()`."""

    def control_plane(self) -> Any:
        """The managed control plane (targets.gke.cluster.GkeClusterApi): describe, updates, node pools,
        operations. Only called when `provided_by_target` returned None."""


@runtime_checkable
class TargetBackend(Protocol):
    """How the Airflow glue reaches one target: picked by kind in targets/registry.py, never by class."""

    cluster: ClusterControl
    console: ConsoleScope | None

    def put_fault_plan(self, body: dict[str, Any], plan: Any) -> None:
        """Put the run's fault plan on its JobSet where the target's runner injects faults (the local target);
        elsewhere a plan is refused: SpecError naming `fault_plan`."""

    def jobset_connection(self) -> dict[str, Any]:
        """Serializable, secret-free connection details (targets/registry.py builds an api from them)."""

    def bucket(self) -> Any:
        """How this target reaches its buckets (adapters.gcs_bucket.BucketAccess)."""

    def google(self) -> tuple[str, Any]:
        """(gcp_conn_id, impersonation_chain) for GCS reads on this target."""

    def checkpoint_store(self, checkpoint_dir: str) -> CheckpointStore:
        """The store that lists this run's persistent checkpoints."""
