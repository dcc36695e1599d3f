"""`MtcJobSetHook`: the provider's JobSet operations for `@task` code and scripts.

Built on the same adapters as the operators (`targets` for the Kubernetes side, the checkpoint
stores for the newest finalized step) and the same pure core (`core.jobset` renders, `core.attempts` reads a
run's attempts back), so a JobSet submitted here is exactly what `MtcJobSetOperator` would submit.

    @task
    def launch():
        hook = MtcJobSetHook(target={"kind": "gke", "project_id": "p", "location": "us-central1",
                                     "cluster_name": "tpu"})
        created = hook.submit(slices, checkpointing, workload, customization={"queue_name": "q"})
        return [a.to_dict() for a in hook.find_by_run(checkpointing["run_name"])]
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Callable, Mapping

from airflow.sdk import BaseHook

from mtc_provider import targets
from mtc_provider.adapters.protocols import CheckpointStore, JobSetApi
from mtc_provider.core import labels as L
from mtc_provider.core.attempts import Attempt, attempts, run_selector
from mtc_provider.core.customization import CustomizationSpec
from mtc_provider.core.jobset import build_jobset, pod_template
from mtc_provider.core.names import label_value
from mtc_provider.core.spec import CheckpointingSpec, WorkloadSpec
from mtc_provider.core.status import JobSetState, evaluate_jobset
from mtc_provider.core.tpu import SliceSpec
from mtc_provider.core.vocabulary import DELETE_UNSPECIFIED
from mtc_provider.target import target_from_dict


def _as(kind: type, value: Any) -> Any:
    from mtc_provider.core.spec import spec_from_dict  # the run description's one dict-to-spec function

    return spec_from_dict(kind, kind.__name__, value)


class MtcJobSetHook(BaseHook):
    """Submit, find, read and delete the provider's training JobSets, and read a run's newest checkpoint step.

    A 403 from the cluster raises `mtc_provider.adapters.kubernetes.Forbidden` (an AirflowFailException: a @task
    fails at once instead of spending its retries), naming the verb, the resource, the namespace and the identity.

    :param target: GkeTarget, LocalTarget, KubernetesTarget, or a dict (kind gke|local|kubernetes); None: local.
    :param kubernetes_conn_id: use this cncf.kubernetes connection instead of GKE credentials.
    :param kubeconfig: a kubeconfig file to use instead (what `mtc status --kubeconfig` passes).
    :param context: the kubeconfig context; default: the file's current context.
    :param checkpoint_store_factory: (checkpoint_dir, gcp_conn_id) -> CheckpointStore; default open_store.
    """

    hook_name = "MTC JobSet"

    def __init__(
        self,
        target: Any = None,
        kubernetes_conn_id: str | None = None,
        kubeconfig: str | None = None,
        context: str | None = None,
        checkpoint_store_factory: Callable[[str, str], CheckpointStore] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target = target_from_dict(target)
        self.kubernetes_conn_id = kubernetes_conn_id
        self.kubeconfig = kubeconfig
        self.context = context
        self.checkpoint_store_factory = checkpoint_store_factory

    @property
    def namespace(self) -> str:
        return self.target.namespace

    @cached_property
    def api(self) -> JobSetApi:
        """The JobSetApi for the target (resolved once: GKE endpoint and CA, or the kubeconfig)."""
        if self.kubeconfig:
            from kubernetes import config

            from mtc_provider.adapters.kubernetes import KubernetesJobSetApi

            # A client per request, read from the file each time: exec plugins (gke-gcloud-auth-plugin) mint
            # a fresh token, as the GKE hooks do.
            # A 403 names the kubeconfig and context beside the identity the API server names.
            return KubernetesJobSetApi(lambda: config.new_client_from_config(config_file=self.kubeconfig,
                                                                             context=self.context),
                                       where=f"kubeconfig {self.kubeconfig}" + (f" context {self.context}"
                                                                                 if self.context else ""))
        return targets.jobset_api(targets.connection_for(self.target, self.kubernetes_conn_id))

    def get_conn(self) -> JobSetApi:
        return self.api

    # --- submit -------------------------------------------------------------------------------------
    def render(self, slices: SliceSpec | Mapping[str, Any], checkpointing: CheckpointingSpec | Mapping[str, Any],
               workload: WorkloadSpec | Mapping[str, Any], labels: Mapping[str, str] | None = None,
               customization: CustomizationSpec | Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The JobSet manifest, validated (a SpecError names the bad field) and customized."""
        return build_jobset(_as(SliceSpec, slices), _as(CheckpointingSpec, checkpointing),
                            _as(WorkloadSpec, workload), labels, CustomizationSpec.from_value(customization))

    def submit(self, slices: SliceSpec | Mapping[str, Any], checkpointing: CheckpointingSpec | Mapping[str, Any],
               workload: WorkloadSpec | Mapping[str, Any], labels: Mapping[str, str] | None = None,
               customization: CustomizationSpec | Mapping[str, Any] | None = None,
               attempt: int | None = None) -> dict[str, Any]:
        """Create the JobSet (in `workload.namespace`) and return it as the API answered.

        :param attempt: the try number written to the attempt label (what `find_by_run` orders by).
        """
        body = self.render(slices, checkpointing, workload, labels, customization)
        if attempt is not None:
            for meta in (body["metadata"], pod_template(body)["metadata"]):
                meta["labels"][L.TRY_NUMBER] = label_value(str(attempt))
                meta["labels"][L.ATTEMPT] = label_value(str(attempt))
        namespace = body["metadata"]["namespace"]
        self.log.info("submitting JobSet %s/%s", namespace, body["metadata"]["name"])
        return self.api.create(namespace, body)

    # --- read ---------------------------------------------------------------------------------------
    def find_by_run(self, run_name: str, namespace: str | None = None) -> list[Attempt]:
        """Every JobSet the provider launched for this run name (each attempt), oldest first."""
        return attempts(self.api.list(namespace or self.namespace, run_selector(run_name)))

    def status(self, name: str, namespace: str | None = None) -> JobSetState:
        """The JobSet's phase, restarts and failure reason (the core's one evaluator)."""
        return evaluate_jobset(self.api.get(namespace or self.namespace, name))

    def newest_step(self, checkpoint_dir: str) -> int | None:
        """The newest finalized checkpoint step in `<base>/<run_name>/checkpoints`, or None."""
        from mtc_provider.targets import backend_for

        backend = backend_for(self.target)
        if self.checkpoint_store_factory is not None:
            store = self.checkpoint_store_factory(checkpoint_dir, backend.google()[0])
        else:
            store = backend.checkpoint_store(checkpoint_dir)
        return store.latest_step(checkpoint_dir)

    def run_status(self, run_name: str, namespace: str | None = None) -> dict[str, Any]:
        """A run at a glance: its attempts (state, restarts, reason) and the newest finalized step."""
        found = self.find_by_run(run_name, namespace)
        checkpoint_dir = next((a.checkpoint_dir for a in reversed(found) if a.checkpoint_dir), "")
        return {
            "run_name": run_name,
            "namespace": namespace or self.namespace,
            "attempts": [a.to_dict() for a in found],
            "checkpoint_dir": checkpoint_dir,
            "newest_step": self.newest_step(checkpoint_dir) if checkpoint_dir else None,
        }

    def failed_pod_logs(self, name: str, namespace: str | None = None, lines: int = 50) -> list[str]:
        """The tails of the JobSet's failed pods' logs, leader first, as task-log lines (empty when none failed)."""
        from mtc_provider.adapters.pod_logs import failed_pod_tails, pod_logs_for

        logs = pod_logs_for(self.api)
        return failed_pod_tails(logs, namespace or self.namespace, name, lines) if logs else []

    def leader_log_follower(self, name: str, namespace: str | None = None, max_lines: int = 50) -> Any:
        """A LeaderLogFollower: each `poll()` returns the leader pod's new log lines (at most `max_lines`)."""
        from mtc_provider.adapters.pod_logs import LeaderLogFollower, pod_logs_for

        logs = pod_logs_for(self.api)
        if logs is None:
            raise NotImplementedError(f"{type(self.api).__name__} has no pod logs")
        return LeaderLogFollower(logs, namespace or self.namespace, name, max_lines)

    def delete(self, name: str, namespace: str | None = None, reason: str = DELETE_UNSPECIFIED) -> None:
        """Delete the JobSet and its pods; its checkpoints stay. `reason`: one of core.vocabulary.DELETE_REASONS."""
        self.api.delete(namespace or self.namespace, name, reason=reason)
