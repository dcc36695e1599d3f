"""The guide's GCP control-plane steps as operators: enable MTC, bucket, IAM, CheckpointConfiguration, node pools.

Every operator takes one `target` (GkeTarget, LocalTarget or KubernetesTarget, or its dict form) instead of
seven connection arguments, is idempotent (a second run changes nothing and says so in its XCom), and waits for GKE
long-running operations in the triggerer when deferrable. The bucket and IAM steps run the same GCS code on both
targets (the local target serves its bucket folders over the GCS JSON API: mtc_local.gcs); steps that
have no local meaning return {"applies": false, "reason": ...} rather than silently succeeding.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, Sequence

from airflow.configuration import conf

from mtc_provider.core.basics.errors import NotReady, OperationFailed, SpecError
from mtc_provider.core.definition.shape.tpu import SliceSpec
from mtc_provider.links.gcp import GcsBucketLink, GkeClusterLink
from mtc_provider.operators.base import TARGET_FIELDS, TargetMixin
from mtc_provider.target import Target

if TYPE_CHECKING:
    from mtc_provider.adapters.protocols import TargetBackend


def not_applicable(kind: str, step: str, why: str) -> dict[str, Any]:
    return {"target": kind, "applies": False, "changed": False, "step": step, "reason": why}


def _slices(slices: SliceSpec | dict[str, Any]) -> SliceSpec:
    # the run description's one dict-to-spec function
    from mtc_provider.core.definition.description.spec import spec_from_dict

    return spec_from_dict(SliceSpec, "slices", slices)


def slices_dict(slices: SliceSpec | dict[str, Any]) -> dict[str, Any]:
    """A plain dict (templatable, serializable) validated through SliceSpec."""
    from mtc_provider.core.definition.description.spec import spec_to_dict

    return spec_to_dict(_slices(slices))


def checked_run(target_kind: str, slices: SliceSpec | dict[str, Any], sizing: dict[str, Any] | None) -> Any:
    """The run description's checks (core.definition.description.run_checks, as `mtc plan` makes them) for an operator's slices and
    sizing: the target's Multislice rule, the guide's buffer rule and the host's memory. Before any call."""
    from mtc_provider.core.definition.description.run_checks import check_run
    from mtc_provider.core.definition.description.spec import SizingSpec, spec_from_dict

    spec = _slices(slices)
    return spec, check_run(target_kind, spec, sizing=spec_from_dict(SizingSpec, "sizing", sizing or {}))


def checked_configuration_names(configuration_name: str | None, bucket_name: str | None) -> str | None:
    """The CheckpointConfiguration's name and the run's bucket as readiness takes them (field, value, allowed before
    any call); the bucket, or None when not given."""
    from mtc_provider.core.definition.description.locations import check_bucket_name
    from mtc_provider.core.basics.names import check_checkpoint_configuration_name

    if configuration_name:
        check_checkpoint_configuration_name(configuration_name, "checkpoint_configuration_name")
    if bucket_name in (None, ""):
        return None
    check_bucket_name(bucket_name, "bucket_name")
    return bucket_name


# Every GCP operator templates its target, the google provider's parameters, the endpoint override and the poll.
COMMON_FIELDS = (*TARGET_FIELDS, "api_endpoint", "poll_interval")


class MtcGcpBaseOperator(TargetMixin):
    """Shared plumbing: Console links, and waiting for a GKE operation (deferred or polled). The target and the
    google provider's parameters (target, gcp_conn_id, impersonation_chain, project_id, location, cluster_name,
    use_dns_endpoint) are TargetMixin's.

    :param api_endpoint: a Container API endpoint override (a private or regional endpoint); None: the default.
    :param deferrable: wait for GKE operations in the triggerer instead of polling in the worker.
    :param poll_interval: seconds between polls of a GKE operation.
    """

    template_fields: Sequence[str] = COMMON_FIELDS
    operator_extra_links = (GkeClusterLink(), GcsBucketLink())

    def __init__(self, *, api_endpoint: str | None = None,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 poll_interval: float = 15.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.api_endpoint = api_endpoint  # Container API endpoint override (private/regional endpoint)
        self.deferrable = deferrable
        self.poll_interval = poll_interval

    def backend(self, target: Target) -> TargetBackend:
        from mtc_provider.targets import backend_for

        return backend_for(target, self.api_endpoint)

    def persist_cluster_link(self, context: Any, backend: TargetBackend) -> None:
        """The cluster's Console link, where the target has a console."""
        if backend.console is not None:
            GkeClusterLink.persist(context, **dataclasses.asdict(backend.console))

    def wait_for(self, context: Any, target: Target, operation: str, state: dict[str, Any]) -> dict[str, Any] | None:
        """Wait for the operation, then continue with `self.step(context, state)`."""
        if self.deferrable:
            from mtc_provider.triggers.gcp import GkeOperationTrigger  # imported where it runs: DAG files stay light

            # Also kept in XCom: some runners (dag.test) resume without the defer kwargs.
            context["ti"].xcom_push(key="mtc_step_state", value=state)
            self.defer(trigger=GkeOperationTrigger(operation, target.to_dict(), self.api_endpoint,
                                                   float(self.poll_interval)),
                       method_name="execute_complete", kwargs={"state": state})
        from mtc_provider.targets.gke.cluster import operation_done

        api = self.backend(target).cluster.control_plane()
        while not operation_done(api.operation(operation)):
            time.sleep(float(self.poll_interval))  # a rendered template is text
        return self.step(context, state)

    def execute_complete(self, context: Any, event: dict[str, Any],
                         state: dict[str, Any] | None = None) -> dict[str, Any] | None:
        from mtc_provider.triggers.gcp import OperationEvent

        ti = context["ti"]
        state = state or ti.xcom_pull(task_ids=ti.task_id, key="mtc_step_state")
        result = OperationEvent.from_payload(event)
        if result.status != "done":
            raise OperationFailed(result.message)
        return self.step(context, state)

    def step(self, context: Any, state: dict[str, Any]) -> dict[str, Any] | None:  # pragma: no cover - abstract
        raise NotImplementedError


class MtcClusterReadinessOperator(MtcGcpBaseOperator):
    """One-shot readiness: pushes the report (key "readiness") and fails at once unless every check passes.

    As the first task of a setup DAG, `fixed_by_later_tasks` names the checks the DAG's following tasks fix
    (core.definition.cluster.readiness.setup_fixable): those may fail, and the log and the report say what will change; any other
    failure (an old control plane, Autopilot, pools without GKE_METADATA) stops the DAG before any change.

    :param slices: SliceSpec or dict (tpu_type, topology, num_slices, machine_type): the node pools to look for.
    :param sizing: {parameters, bytes_per_parameter, buffer, allow_any_buffer}: the ramdisk must fit the machine
        type's memory (refused before any call, as `mtc plan` refuses it); None: the guide's defaults.
    :param checkpoint_configuration_name: also check this CheckpointConfiguration exists and serves the run: its
        nodeSelector selects the slices' machine type, its bucket is `bucket_name` (when given) and its
        inMemoryVolumeSize holds the ramdisk of `sizing` (when given); None: skip the check.
    :param bucket_name: the run's bucket, which the CheckpointConfiguration must back the ramdisk up to.
    :param capacity: on-demand, spot or reservation (the run's customization.capacity): on GKE enough node pools of
        the slices' shape must have that capacity (core.definition.shape.capacity); node pools are not visible on kubernetes.
    :param reservation: the reservation's name when capacity is reservation.
    :param fixed_by_later_tasks: names of checks that later tasks fix (templated); None: every check must pass.
    """

    template_fields: Sequence[str] = (*COMMON_FIELDS, "slices", "sizing", "checkpoint_configuration_name",
                                      "bucket_name", "capacity", "reservation", "fixed_by_later_tasks")

    def __init__(self, *, slices: SliceSpec | dict[str, Any], sizing: dict[str, Any] | None = None,
                 checkpoint_configuration_name: str | None = None, bucket_name: str | None = None,
                 capacity: str = "on-demand", reservation: str = "",
                 fixed_by_later_tasks: Sequence[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.capacity = capacity
        self.reservation = reservation
        self.slices = slices
        self.sizing = sizing
        self.checkpoint_configuration_name = checkpoint_configuration_name
        self.bucket_name = bucket_name
        self.fixed_by_later_tasks = fixed_by_later_tasks

    def execute(self, context: Any) -> dict[str, Any]:
        from mtc_provider.core.definition.cluster.readiness import all_ok, changes_summary, preflight, summary

        target = self._target()
        spec, checked = checked_run(target.kind, self.slices, self.sizing)  # bad input fails before any call
        bucket_name = checked_configuration_names(self.checkpoint_configuration_name, self.bucket_name)
        from mtc_provider.core.definition.shape.capacity import check_capacity

        capacity = check_capacity(self.capacity, self.reservation)
        for warning in checked.warnings:
            self.log.warning("%s", warning)
        slices = dataclasses.asdict(spec)
        backend = self.backend(target)
        self.persist_cluster_link(context, backend)
        checks = backend.cluster.readiness(slices, self.sizing, self.checkpoint_configuration_name, bucket_name,
                                           capacity)
        blocking, to_change = preflight(checks, list(self.fixed_by_later_tasks or []))
        report = {"target": target.kind, "ready": all_ok(checks), "checks": [c.to_dict() for c in checks],
                  "blocking": [c.name for c in blocking], "will_change": [c.name for c in to_change]}
        context["ti"].xcom_push(key="readiness", value=report)
        if blocking and self.fixed_by_later_tasks is None:
            raise NotReady(f"{target.kind} target is not ready for MTC:\n{summary(checks)}", report["checks"])
        if blocking:
            raise NotReady(f"{target.kind} target is not ready for MTC and no following task fixes "
                           f"{', '.join(c.name for c in blocking)}; nothing was changed:\n{summary(checks)}",
                           report["checks"])
        if self.fixed_by_later_tasks is not None:
            self.log.info("%s\n%s", changes_summary(to_change), summary(checks))
        else:
            self.log.info("ready:\n%s", summary(checks))
        return report


class MtcEnableCheckpointingOperator(MtcGcpBaseOperator):
    """Opt-in: Workload Identity pool first, then the two addons (two updates, the guide's order).

    Its ``target`` (operators.base.TargetMixin) is the GKE cluster; on a local or kubernetes target the operator
    changes nothing and its result says why.

    :param api_endpoint: a Container API endpoint override; None: the default.
    :param deferrable: wait for the cluster updates in the triggerer.
    :param poll_interval: seconds between polls of each cluster update.
    """

    def execute(self, context: Any) -> dict[str, Any] | None:
        target = self._target()
        backend = self.backend(target)
        why = backend.cluster.provided_by_target("enable_checkpointing", 0)
        if why:
            return not_applicable(target.kind, "enable_checkpointing", why)
        self.persist_cluster_link(context, backend)
        return self.step(context, {"applied": []})

    def step(self, context: Any, state: dict[str, Any]) -> dict[str, Any] | None:
        from mtc_provider.core.definition.cluster.readiness import enable_steps

        target = self._target()
        api = self.backend(target).cluster.control_plane()
        remaining = enable_steps(api.describe(), target.project_id)
        if not remaining:
            return {"target": target.kind, "changed": bool(state["applied"]), "applied": state["applied"],
                    "already_enabled": not state["applied"]}
        nxt = remaining[0]
        if nxt in state["applied"]:
            raise OperationFailed(f"the cluster still lacks {nxt} after its update finished; cluster unchanged?")
        operation = api.set_workload_pool() if nxt == "workload_pool" else api.enable_mtc_addons()
        self.log.info("update %s started: operation %s", nxt, operation)
        return self.wait_for(context, target, operation, {"applied": [*state["applied"], nxt]})


class MtcCreateBucketOperator(MtcGcpBaseOperator):
    """The checkpoint bucket with HNS and UBLA in a region or multi-region; an existing compatible bucket is success.

    :param bucket_name: the checkpoint bucket's name (templated).
    :param bucket_location: its region or multi-region; empty: the cluster's region.
    """

    template_fields: Sequence[str] = (*COMMON_FIELDS, "bucket_name", "bucket_location")

    def __init__(self, *, bucket_name: str, bucket_location: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bucket_name = bucket_name
        self.bucket_location = bucket_location

    def execute(self, context: Any) -> dict[str, Any]:
        from mtc_provider.adapters.gcs_bucket import GcsBucketApi
        from mtc_provider.core.definition.description.locations import check_bucket_name
        from mtc_provider.core.definition.description.spec import BucketSpec

        target = self._target()
        check_bucket_name(self.bucket_name)
        if self.bucket_location:
            BucketSpec(self.bucket_name, self.bucket_location)  # a zone fails here, before any call
        backend = self.backend(target)
        access = backend.bucket()
        spec = BucketSpec(self.bucket_name, self.bucket_location or access.location)
        if backend.console is not None:
            GcsBucketLink.persist(context, bucket=spec.name, project_id=access.project_id)
        result = GcsBucketApi(access.client).ensure_bucket(spec, access.project_id)
        return {"target": target.kind, "changed": result.created, **result.to_dict()}

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the bucket (namespace gs://BUCKET, name "/", as the google provider names a bucket's root),
        the output of this operator (mtc_provider.lineage)."""
        from mtc_provider.lineage import operator_lineage

        return operator_lineage(outputs=[f"gs://{self.bucket_name}"])


class MtcGrantBucketAccessOperator(MtcGcpBaseOperator):
    """roles/storage.objectUser on the bucket (never the project) to the guide's two principals.

    :param bucket_name: the checkpoint bucket (templated).
    :param workload_namespace: the Kubernetes namespace of the training pods' service account.
    :param workload_service_account: the Kubernetes service account the training pods run as.
    :param project_number: the project's number for the principals; None: looked up through Resource Manager.
    :param resource_manager_endpoint: a Resource Manager endpoint override; None: the default.
    """

    template_fields: Sequence[str] = (*COMMON_FIELDS, "bucket_name", "workload_namespace", "workload_service_account",
                                      "project_number", "resource_manager_endpoint")

    def __init__(self, *, bucket_name: str, workload_namespace: str = "default",
                 workload_service_account: str = "default", project_number: str | None = None,
                 resource_manager_endpoint: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bucket_name = bucket_name
        self.workload_namespace = workload_namespace
        self.workload_service_account = workload_service_account
        self.project_number = project_number
        self.resource_manager_endpoint = resource_manager_endpoint

    def members(self, backend: TargetBackend, project_id: str, known_number: str | None) -> list[str]:
        from mtc_provider.adapters.gcs_bucket import project_number
        from mtc_provider.core.definition.cluster.iam import bucket_members

        number = self.project_number or known_number or project_number(
            project_id, *backend.google(), self.resource_manager_endpoint)
        return bucket_members(project_id, str(number), self.workload_namespace, self.workload_service_account)

    def execute(self, context: Any) -> dict[str, Any]:
        from mtc_provider.adapters.gcs_bucket import GcsBucketApi
        from mtc_provider.core.definition.cluster.iam import BUCKET_ROLE
        from mtc_provider.core.basics.names import check_namespace, check_service_account

        target = self._target()
        check_namespace(self.workload_namespace)  # bad input fails before any call
        check_service_account(self.workload_service_account)
        backend = self.backend(target)
        access = backend.bucket()
        members = self.members(backend, access.project_id, access.project_number)
        if backend.console is not None:
            GcsBucketLink.persist(context, bucket=self.bucket_name, project_id=access.project_id)
        result = GcsBucketApi(access.client).grant(self.bucket_name, BUCKET_ROLE, members)
        self.log.info("added %s; already present %s", result.added, result.already_present)
        return {"target": target.kind, **result.to_dict()}


class MtcApplyCheckpointConfigurationOperator(MtcGcpBaseOperator):
    """Create or update in place the cluster-scoped CheckpointConfiguration; a no-op when unchanged.

    :param name: the CheckpointConfiguration's name (cluster-scoped).
    :param bucket_name: the bucket that backs the ramdisk's persistent tier.
    :param slices: SliceSpec or dict: the machine type the configuration selects and the hosts per slice.
    :param sizing: {parameters, bytes_per_parameter, buffer, allow_any_buffer} for the guide's ramdisk formula;
        a ramdisk larger than the machine type's memory is refused before any call.
    :param gcs_fuse_mount_options: GCS FUSE mount options (a list of strings); None: the guide's.
    :param csi_ephemeral_limit: the CSI driver's ephemeral storage limit (a quantity); None: the CRD's default.
    """

    template_fields: Sequence[str] = (*COMMON_FIELDS, "name", "bucket_name", "slices", "sizing",
                                      "gcs_fuse_mount_options", "csi_ephemeral_limit")

    def __init__(self, *, name: str, bucket_name: str, slices: SliceSpec | dict[str, Any],
                 sizing: dict[str, Any] | None = None, gcs_fuse_mount_options: list[str] | None = None,
                 csi_ephemeral_limit: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name
        self.bucket_name = bucket_name
        self.slices = slices
        self.sizing = sizing
        self.gcs_fuse_mount_options = gcs_fuse_mount_options
        self.csi_ephemeral_limit = csi_ephemeral_limit

    def body(self, target_kind: str) -> dict[str, Any]:
        """The CheckpointConfiguration, after the run description's checks for `target_kind` (core.definition.description.run_checks)."""
        from mtc_provider.core.definition.render.checkpoint_config import build_checkpoint_configuration

        spec, checked = checked_run(target_kind, self.slices, self.sizing)
        for warning in checked.warnings:
            self.log.warning("%s", warning)
        return build_checkpoint_configuration(self.name, self.bucket_name, spec, checked.ramdisk,
                                              self.gcs_fuse_mount_options, self.csi_ephemeral_limit)

    def execute(self, context: Any) -> dict[str, Any]:
        target = self._target()
        body = self.body(target.kind)  # bad input fails here, before any call
        from mtc_provider.adapters.checkpoint_configuration import CheckpointConfigurationApi

        backend = self.backend(target)
        self.persist_cluster_link(context, backend)
        # Every target's cluster serves the CRD (the local one too): the same apply, another client.
        result = CheckpointConfigurationApi(backend.cluster.kubernetes_client_factory()).apply(body)
        self.log.info("CheckpointConfiguration %s: %s", result.name, result.action)
        return {"target": target.kind, **result.to_dict()}


class MtcCreateTpuNodePoolsOperator(MtcGcpBaseOperator):
    """One TPU node pool per slice (`<prefix>-<i>`), created one at a time; existing pools of the shape are kept.

    :param slices: SliceSpec or dict: one node pool per slice of this TPU type, topology and machine type.
    :param node_pool_prefix: node pools are named `<prefix>-<i>`.
    :param node_locations: the TPU zone(s) of the pools (the guide's `--node-locations=${TPU_ZONE}`), zones of the
        cluster's region; None: the cluster's zone on a zonal cluster. Required on a regional cluster.
    :param oauth_scopes: the nodes' OAuth scopes; None: gcloud's `gke-default` scopes (storage read-only for image
        pulls, logging, monitoring, ...), or cloud-platform when `node_service_account` is given.
    :param node_service_account: the nodes' Google service account; None: the Compute Engine default one.
    :param capacity: on-demand, spot or reservation: the run's `customization.capacity`, whose node selectors its
        pods carry (core.definition.shape.capacity); an existing pool of another capacity is refused.
    :param reservation: the reservation's name when capacity is reservation.
    """

    template_fields: Sequence[str] = (*COMMON_FIELDS, "slices", "node_pool_prefix", "node_locations",
                                      "oauth_scopes", "node_service_account", "capacity", "reservation")

    def __init__(self, *, slices: SliceSpec | dict[str, Any], node_pool_prefix: str = "mtc-slice",
                 node_locations: list[str] | None = None, oauth_scopes: list[str] | None = None,
                 node_service_account: str | None = None, capacity: str = "on-demand", reservation: str = "",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.capacity = capacity
        self.reservation = reservation
        self.slices = slices
        self.node_pool_prefix = node_pool_prefix
        self.node_locations = node_locations
        self.oauth_scopes = oauth_scopes
        self.node_service_account = node_service_account

    def pool_settings(self, target: Target) -> dict[str, Any]:
        """Zones, scopes and service account, validated (bad input fails here, before any call)."""
        from mtc_provider.core.definition.shape.capacity import check_capacity
        from mtc_provider.core.definition.shape.node_pools import (
            check_node_service_account, node_locations, node_scopes)

        account = check_node_service_account(self.node_service_account)
        capacity, reservation = check_capacity(self.capacity, self.reservation)
        return {"node_locations": node_locations(target.location, self.node_locations),
                "oauth_scopes": node_scopes(self.oauth_scopes, account), "service_account": account,
                "capacity": capacity, "reservation": reservation}

    def execute(self, context: Any) -> dict[str, Any] | None:
        target = self._target()
        spec = _slices(self.slices)
        from mtc_provider.core.basics.names import check_node_pool_prefix

        check_node_pool_prefix(self.node_pool_prefix)
        backend = self.backend(target)
        why = backend.cluster.provided_by_target("tpu_node_pools", spec.total_hosts)
        if why:
            return not_applicable(target.kind, "tpu_node_pools", why)
        self.pool_settings(target)
        self.persist_cluster_link(context, backend)
        return self.step(context, {"created": []})

    def step(self, context: Any, state: dict[str, Any]) -> dict[str, Any] | None:
        target = self._target()
        spec = _slices(self.slices)
        api = self.backend(target).cluster.control_plane()
        pools = {pool["name"]: pool for pool in api.node_pools()}
        names = [f"{self.node_pool_prefix}-{i}" for i in range(spec.num_slices)]
        from mtc_provider.core.definition.shape.capacity import check_capacity, describe, pool_capacity

        wanted = check_capacity(self.capacity, self.reservation)
        for name in names:  # every existing pool's shape first: a wrong one is refused before any create
            pool = pools.get(name)
            shape = pool and ((pool.get("config") or {}).get("machineType"),
                              (pool.get("placementPolicy") or {}).get("tpuTopology"))
            if pool is not None and shape != (spec.machine_type, spec.topology):
                raise SpecError("node_pool_prefix", self.node_pool_prefix,
                                f"a prefix whose pools do not exist yet: {name} exists with {shape}, "
                                f"not ({spec.machine_type}, {spec.topology})")
            if pool is not None and pool_capacity(pool) != wanted:
                raise SpecError("node_pool_prefix", self.node_pool_prefix,
                                f"a prefix whose pools do not exist yet: {name} exists with capacity "
                                f"{describe(*pool_capacity(pool))}, not {describe(*wanted)}")
        for name in names:
            if name not in pools:
                if name in state["created"]:
                    raise OperationFailed(f"node pool {name} is missing after its create operation finished")
                operation = api.create_tpu_node_pool(name, spec, **self.pool_settings(target))
                self.log.info("creating node pool %s: operation %s", name, operation)
                return self.wait_for(context, target, operation, {"created": [*state["created"], name]})
        kept = [name for name in names if name not in state["created"]]
        settings = self.pool_settings(target)
        return {"target": target.kind, "changed": bool(state["created"]), "created": state["created"],
                "already_present": kept, "node_locations": settings["node_locations"],
                "oauth_scopes": settings["oauth_scopes"]}
