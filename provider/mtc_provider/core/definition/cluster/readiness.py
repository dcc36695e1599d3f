"""Is a cluster ready for Multi-Tier Checkpointing? Pure checks over plain dicts (the local machine's are the
rehearsal's, mtc_local.target.machine).

The cluster is the REST JSON shape of `projects.locations.clusters` (camelCase, as `gcloud container
clusters describe --format=json` prints it). Every check carries the exact gcloud command (or provider
operator) that fixes it, so the report is actionable on its own. Also here: the pure IAM policy merge.
"""

from __future__ import annotations

import copy
import shlex
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from mtc_provider.core.definition.cluster.iam import workload_identity_pool
from mtc_provider.core.definition.shape.sizing import RamdiskSize
from mtc_provider.core.definition.shape.tpu import TPU_TYPES, SliceSpec
from mtc_provider.core.basics.versions import MTC_MIN_VERSION_NEW, mtc_version_window
from mtc_provider.core.basics.vocabulary import CHECKPOINT_CONFIGURATION, JOBSET

ADDON_HSC = "highScaleCheckpointingConfig"
ADDON_FUSE = "gcsFuseCsiDriverConfig"
# Machine type -> TPU type, for every machine type the guide supports.
_MACHINE_TO_TPU = {machine: kind.name for kind in TPU_TYPES.values() for machine in kind.machine_types}


@dataclass(frozen=True)
class Check:
    """One readiness check: what was seen, what is needed, and what fixes it."""

    name: str
    ok: bool
    observed: Any
    expected: Any
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Check":
        return cls(**{key: data[key] for key in ("name", "ok", "observed", "expected", "fix")})


def all_ok(checks: Sequence[Check]) -> bool:
    return all(check.ok for check in checks)


def summary(checks: Sequence[Check]) -> str:
    """A readable report: one line per check, failures with their fix."""
    lines = []
    for check in checks:
        mark = "ok  " if check.ok else "FAIL"
        lines.append(f"[{mark}] {check.name}: observed {check.observed!r}, expected {check.expected!r}")
        if not check.ok and check.fix:
            lines.append(f"       fix: {check.fix}")
    return "\n".join(lines)


# --- the guide's gcloud commands -------------------------------------------------------------------


def _cmd(*parts: str) -> str:
    return " ".join(shlex.quote(part) if " " in part or '"' in part else part for part in parts)


def gcloud_set_workload_pool(cluster: str, location: str, project_id: str) -> str:
    return _cmd("gcloud", "container", "clusters", "update", cluster,
                f"--workload-pool={workload_identity_pool(project_id)}", f"--location={location}",
                f"--project={project_id}")


def gcloud_enable_addons(cluster: str, location: str, project_id: str) -> str:
    return _cmd("gcloud", "container", "clusters", "update", cluster,
                "--update-addons=HighScaleCheckpointing=ENABLED,GcsFuseCsiDriver=ENABLED",
                f"--location={location}", f"--project={project_id}")


def gcloud_create_node_pool(cluster: str, location: str, project_id: str, pool: str, slices: SliceSpec,
                            tpu_zone: str = "${TPU_ZONE}") -> str:
    return _cmd("gcloud", "container", "node-pools", "create", pool, f"--cluster={cluster}", f"--location={location}",
                f"--node-locations={tpu_zone}", f"--machine-type={slices.machine_type}",
                f"--tpu-topology={slices.topology}", f"--num-nodes={slices.hosts_per_slice}",
                "--placement-type=COMPACT", "--workload-metadata=GKE_METADATA", f"--project={project_id}")


def gcloud_pool_workload_metadata(cluster: str, location: str, project_id: str, pool: str) -> str:
    return _cmd("gcloud", "container", "node-pools", "update", pool, f"--cluster={cluster}", f"--location={location}",
                "--workload-metadata=GKE_METADATA", f"--project={project_id}")


def gcloud_upgrade_master(cluster: str, location: str, project_id: str) -> str:
    return _cmd("gcloud", "container", "clusters", "upgrade", cluster, "--master",
                f"--cluster-version={MTC_MIN_VERSION_NEW}", f"--location={location}", f"--project={project_id}")


# --- cluster checks ---------------------------------------------------------------------------------


def _get(data: Mapping[str, Any], path: str, default: Any = None) -> Any:
    value: Any = data
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return default
        value = value[key]
    return value


def tpu_node_pools(cluster: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The cluster's TPU node pools of a supported type: name, machine type, topology, tpu type, status."""
    pools = []
    for pool in cluster.get("nodePools") or []:
        machine = _get(pool, "config.machineType", "")
        if machine in _MACHINE_TO_TPU:
            pools.append({
                "name": pool.get("name", ""),
                "machineType": machine,
                "tpuTopology": _get(pool, "placementPolicy.tpuTopology", ""),
                "tpuType": _MACHINE_TO_TPU[machine],
                "status": pool.get("status", ""),
                "workloadMetadata": _get(pool, "config.workloadMetadataConfig.mode", "") or "MODE_UNSPECIFIED",
            })
    return pools


def matching_node_pools(cluster: Mapping[str, Any], slices: SliceSpec) -> list[str]:
    return [
        pool["name"] for pool in tpu_node_pools(cluster)
        if pool["machineType"] == slices.machine_type and pool["tpuTopology"] == slices.topology
    ]


def evaluate_cluster(cluster: Mapping[str, Any], slices: SliceSpec, project_id: str, location: str,
                     checkpoint_configuration: Mapping[str, Any] | None = None,
                     checkpoint_configuration_name: str | None = None, bucket_name: str | None = None,
                     ramdisk: RamdiskSize | None = None, capacity: tuple[str, str] = ("on-demand", "")) -> list[Check]:
    """Every check of the guide's "Configure the GKE cluster" section, in the order a user would fix them.

    `checkpoint_configuration_name` asks for the CheckpointConfiguration check; `checkpoint_configuration`
    is that object as read from the cluster (None when absent); it must serve `slices` (and `bucket_name` and
    `ramdisk` when given: configuration_check).
    """
    name = cluster.get("name", "")
    pool = workload_identity_pool(project_id)
    checks = []

    observed_pool = _get(cluster, "workloadIdentityConfig.workloadPool", "") or ""
    checks.append(Check("workload_identity_pool", observed_pool == pool, observed_pool or None, pool,
                        f"{gcloud_set_workload_pool(name, location, project_id)}  (or MtcEnableCheckpointingOperator)"))
    for check_name, key in (("high_scale_checkpointing_addon", ADDON_HSC), ("gcs_fuse_csi_driver_addon", ADDON_FUSE)):
        enabled = bool(_get(cluster, f"addonsConfig.{key}.enabled", False))
        checks.append(Check(check_name, enabled, enabled, True,
                            f"{gcloud_enable_addons(name, location, project_id)}  (or MtcEnableCheckpointingOperator)"))

    version = cluster.get("currentMasterVersion", "") or ""
    enabling = not bool(_get(cluster, f"addonsConfig.{ADDON_HSC}.enabled", False))
    ok, needed = mtc_version_window(version, enabling)
    checks.append(Check("control_plane_version", ok, version or None, needed,
                        gcloud_upgrade_master(name, location, project_id)))

    autopilot = bool(_get(cluster, "autopilot.enabled", False))
    checks.append(Check("not_autopilot", not autopilot, "Autopilot" if autopilot else "Standard", "Standard",
                        "create a Standard cluster: MTC does not support Autopilot"))

    matching = matching_node_pools(cluster, slices)
    wanted = max(slices.num_slices, 2)
    observed_pools = [f"{p['name']} ({p['machineType']}, {p['tpuTopology'] or '?'})" for p in tpu_node_pools(cluster)]
    checks.append(Check(
        "tpu_node_pools", len(matching) >= wanted, observed_pools,
        f">= {wanted} node pools of {slices.machine_type} with topology {slices.topology} (one per slice)",
        f"{gcloud_create_node_pool(name, location, project_id, '<POOL_NAME>', slices, _tpu_zone(location))}  "
        f"x {max(0, wanted - len(matching))} (or MtcCreateTpuNodePoolsOperator)",
    ))

    checks.append(workload_metadata_check(cluster, slices, project_id, location))
    if capacity[0] != "on-demand":
        checks.append(capacity_check(cluster, slices, project_id, location, capacity))

    if checkpoint_configuration_name:
        pools = [p for p in cluster.get("nodePools") or [] if p.get("name") in matching_node_pools(cluster, slices)]
        checks.append(configuration_check(checkpoint_configuration, checkpoint_configuration_name, slices,
                                          bucket_name, ramdisk, pools))
    return checks


def capacity_check(cluster: Mapping[str, Any], slices: SliceSpec, project_id: str, location: str,
                   capacity: tuple[str, str]) -> Check:
    """Spot or reservation runs (customization.capacity) select nodes of that capacity only: count those pools."""
    from mtc_provider.core.definition.shape.capacity import describe, pool_capacity

    wanted = max(slices.num_slices, 2)
    shaped = {p["name"] for p in tpu_node_pools(cluster) if p["name"] in matching_node_pools(cluster, slices)}
    pools = [p for p in cluster.get("nodePools") or [] if p.get("name") in shaped]
    observed = [f"{p['name']} ({describe(*pool_capacity(p))})" for p in pools]
    ok = sum(pool_capacity(p) == capacity for p in pools) >= wanted
    flag = "--spot" if capacity[0] == "spot" else f"--reservation-affinity=specific --reservation={capacity[1]}"
    return Check("tpu_node_pools_capacity", ok, observed,
                 f">= {wanted} node pools of {slices.machine_type} {slices.topology} with capacity "
                 f"{describe(*capacity)} (the run's customization.capacity: its pods select only those nodes)",
                 f"{gcloud_create_node_pool(cluster.get('name', ''), location, project_id, '<POOL_NAME>', slices, _tpu_zone(location))} "
                 f"{flag}  (or MtcCreateTpuNodePoolsOperator with capacity={capacity[0]!r})")


def _tpu_zone(location: str) -> str:
    """A zonal cluster's pools go to its zone; a regional one needs the TPU zone said (core.definition.shape.node_pools)."""
    from mtc_provider.core.definition.shape.node_pools import is_regional

    return "${TPU_ZONE}" if is_regional(location) else location


def workload_metadata_check(cluster: Mapping[str, Any], slices: SliceSpec, project_id: str, location: str) -> Check:
    """Every TPU node pool of the slices' shape runs the GKE metadata server (`workloadMetadataConfig.mode:
    GKE_METADATA`): without it the training pods and the MTC driver get the node's identity, not their Kubernetes
    service account's, and the bucket bindings do not apply. Enabling Workload Identity on the cluster leaves
    existing node pools as they are (GKE, "Use Workload Identity Federation for GKE": update existing node pools)."""
    name = cluster.get("name", "")
    shape = {(slices.machine_type, slices.topology)}
    lacking = [pool for pool in tpu_node_pools(cluster)
               if (pool["machineType"], pool["tpuTopology"]) in shape and pool["workloadMetadata"] != "GKE_METADATA"]
    fixes = [gcloud_pool_workload_metadata(name, location, project_id, pool["name"]) for pool in lacking]
    return Check("tpu_node_pools_workload_identity", not lacking,
                 [f"{pool['name']} ({pool['workloadMetadata']})" for pool in lacking] or "GKE_METADATA on every pool",
                 f"workloadMetadataConfig.mode GKE_METADATA on the {slices.machine_type} {slices.topology} node pools",
                 "; ".join(fixes))


# Which readiness checks a later task of the cluster-setup DAG fixes, by the opt-in that runs that task.
SETUP_FIXES: dict[str, tuple[str, ...]] = {
    "enable_mtc": ("workload_identity_pool", "high_scale_checkpointing_addon", "gcs_fuse_csi_driver_addon"),
    "create_node_pools": ("tpu_node_pools",),
}
SETUP_FIXED_BY = {"workload_identity_pool": "MtcEnableCheckpointingOperator (update 1: --workload-pool)",
                  "high_scale_checkpointing_addon": "MtcEnableCheckpointingOperator (update 2: --update-addons)",
                  "gcs_fuse_csi_driver_addon": "MtcEnableCheckpointingOperator (update 2: --update-addons)",
                  "tpu_node_pools": "MtcCreateTpuNodePoolsOperator (one node pool per missing slice)"}


def setup_fixable(opt_ins: Mapping[str, Any]) -> list[str]:
    """The checks the setup DAG's later tasks will fix, given its opt-ins (e.g. {"enable_mtc": True})."""
    return [name for flag, names in SETUP_FIXES.items() if opt_ins.get(flag) for name in names]


def preflight(checks: Sequence[Check], fixable: Sequence[str]) -> tuple[list[Check], list[Check]]:
    """Split failed checks into (blocking, to_change): `fixable` ones a following task changes; the rest block
    before any of those tasks runs (an old control plane, Autopilot, pools without GKE_METADATA...)."""
    failed = [check for check in checks if not check.ok]
    return [c for c in failed if c.name not in fixable], [c for c in failed if c.name in fixable]


def changes_summary(to_change: Sequence[Check]) -> str:
    """What the following tasks will change, one line each."""
    if not to_change:
        return "the following tasks change nothing on the cluster (every check passes)"
    lines = ["the following tasks will change:"]
    for check in to_change:
        lines.append(f"  - {check.name}: observed {check.observed!r}, will be {check.expected!r} by "
                     f"{SETUP_FIXED_BY.get(check.name, 'a following task')}")
    return "\n".join(lines)


def run_ramdisk(slices: SliceSpec, sizing: Mapping[str, Any] | None) -> RamdiskSize | None:
    """The run's ramdisk per host from a readiness caller's `sizing` dict; None when no sizing was given (the
    CheckpointConfiguration's inMemoryVolumeSize is then not checked)."""
    from mtc_provider.core.definition.description.spec import SizingSpec, spec_from_dict

    return None if sizing is None else spec_from_dict(SizingSpec, "sizing", sizing).size(slices.hosts_per_slice)


def configuration_check(configuration: Mapping[str, Any] | None, name: str, slices: SliceSpec | None = None,
                        bucket_name: str | None = None, ramdisk: RamdiskSize | None = None,
                        pools: Sequence[Mapping[str, Any]] | None = None) -> Check:
    """The named CheckpointConfiguration exists (`configuration` as read from the cluster; None when absent) and,
    given the run's slices (and its bucket, its ramdisk), serves it: core.definition.cluster.configuration_match names each field that
    does not. `pools`: the Container API's node pools of the slices' shape, when known (GKE), so that a selector
    naming a pool is judged against them."""
    from mtc_provider.core.definition.cluster.configuration_match import configuration_mismatches

    fix = "MtcApplyCheckpointConfigurationOperator (or kubectl apply -f checkpoint-configuration.yaml)"
    if configuration is None:
        return Check("checkpoint_configuration", False, None, f"CheckpointConfiguration {name}", fix)
    bucket = _get(configuration, "spec.cloudStorageBucketName")
    if slices is None:
        return Check("checkpoint_configuration", True, f"{name} (bucket {bucket})", f"CheckpointConfiguration {name}",
                     fix)
    problems = configuration_mismatches(configuration, slices, bucket_name, ramdisk, pools)
    wanted = [f"a nodeSelector every node of the run matches ({slices.machine_type} {slices.topology}"
              + (f", pools {', '.join(p.get('name', '') for p in pools)})" if pools else ")")] + ([f"bucket {bucket_name}"] if bucket_name else []) + (
        [f"inMemoryVolumeSize >= {ramdisk.quantity}"] if ramdisk else [])
    observed = "; ".join(f"CheckpointConfiguration {name} {p}" for p in problems) or f"{name} (bucket {bucket})"
    return Check("checkpoint_configuration", not problems, observed,
                 f"CheckpointConfiguration {name} serving this run: {', '.join(wanted)}",
                 f"{fix} with the run's slices, bucket and sizing (it replaces the spec), or kubectl edit "
                 f"checkpointconfiguration {name}")


JOBSET_INSTALL = "kubectl apply --server-side -f https://github.com/kubernetes-sigs/jobset/releases/latest/download/manifests.yaml"


def evaluate_kubernetes(served: Mapping[str, bool], checkpoint_configuration: Mapping[str, Any] | None = None,
                        checkpoint_configuration_name: str | None = None, slices: SliceSpec | None = None,
                        bucket_name: str | None = None, ramdisk: RamdiskSize | None = None) -> list[Check]:
    """A cluster reached through a plain Kubernetes connection: the APIs the provider needs are served.

    `served` maps `<plural>.<group>/<version>` to whether the cluster's discovery lists it. Node pools and
    addons are not visible through the Kubernetes API alone, so they are not checked here.
    """
    checks = []
    for name, resource, fix in (
        ("jobset_api", JOBSET, JOBSET_INSTALL),
        ("checkpoint_configuration_api", CHECKPOINT_CONFIGURATION,
         "enable GKE's HighScaleCheckpointing addon, which installs the CRD (MtcEnableCheckpointingOperator on a "
         "gke target)"),
    ):
        ok = bool(served.get(resource.served_key))
        checks.append(Check(name, ok, "served" if ok else "not served", f"{resource.served_key} served", fix))
    if checkpoint_configuration_name:
        checks.append(configuration_check(checkpoint_configuration, checkpoint_configuration_name, slices,
                                          bucket_name, ramdisk))
    return checks


# --- RBAC in the JobSet's namespace ----------------------------------------------------------------------
# What the launch operator's identity (worker) and the trigger's (triggerer) do in the JobSet's namespace: one
# table for the readiness check and the Role in docs/deployment.md. (API group, resource, verbs, what for.)
RBAC_NEEDS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    (JOBSET.group, JOBSET.plural, ("create", "get", "list", "watch", "delete"),
     "submit, find, reattach, watch and delete attempts"),
    ("", "pods", ("get", "list"), "start-up supervision (image pulls, capacity) and failed-pod log tails"),
    ("", "pods/log", ("get",), "the failed pods' log tails"),
    # The trigger lists the pods' Warning events (FailedMount, FailedAttachVolume) while they wait to start
    # (adapters.kubernetes list_pod_events); watch lets the same identity follow them (`kubectl get events -w`).
    ("", "events", ("list", "watch"), "the volume events of pods that do not start (FailedMount)"),
    ("", "configmaps", ("create", "get", "update", "delete"), "the run lock (one ConfigMap per run name)"),
)


def rbac_key(verb: str, group: str, resource: str) -> str:
    """`get configmaps`, `create jobsets.jobset.x-k8s.io`: one permission, as `kubectl auth can-i` spells it."""
    return f"{verb} {resource}.{group}" if group else f"{verb} {resource}"


def rbac_permissions() -> list[tuple[str, str, str]]:
    """Every (verb, group, resource) of RBAC_NEEDS, one SelfSubjectAccessReview each."""
    return [(verb, group, resource) for group, resource, verbs, _ in RBAC_NEEDS for verb in verbs]


def evaluate_rbac(allowed: Mapping[str, bool], namespace: str) -> list[Check]:
    """One check per resource of RBAC_NEEDS from SelfSubjectAccessReview answers (`rbac_key` -> allowed)."""
    checks = []
    for group, resource, verbs, why in RBAC_NEEDS:
        denied = [verb for verb in verbs if not allowed.get(rbac_key(verb, group, resource), False)]
        qualified = f"{resource}.{group}" if group else resource
        plural, _, sub = resource.partition("/")
        role = f"mtc-{resource.replace('/', '-')}"
        target = f"{plural}.{group}" if group else plural
        rule = f"--verb={','.join(verbs)} --resource={target}{'/' + sub if sub else ''}"
        checks.append(Check(
            f"rbac_{resource.replace('/', '_')}", not denied,
            f"denied: {', '.join(denied)}" if denied else "allowed",
            f"{', '.join(verbs)} {qualified} in namespace {namespace} ({why})",
            f"kubectl create role {role} -n {namespace} {rule} && kubectl create rolebinding {role} -n {namespace} "
            f"--role={role} --user=<the connection's identity> (or apply the Role of docs/deployment.md)"))
    return checks


def enable_steps(cluster: Mapping[str, Any], project_id: str) -> list[str]:
    """What is left to enable MTC, in the guide's order: "workload_pool" first, then "addons"."""
    steps = []
    if (_get(cluster, "workloadIdentityConfig.workloadPool", "") or "") != workload_identity_pool(project_id):
        steps.append("workload_pool")
    if not (_get(cluster, f"addonsConfig.{ADDON_HSC}.enabled", False)
            and _get(cluster, f"addonsConfig.{ADDON_FUSE}.enabled", False)):
        steps.append("addons")
    return steps


# --- IAM policy merge -------------------------------------------------------------------------------


def add_members(policy: Mapping[str, Any], role: str, members: Sequence[str]) -> tuple[dict[str, Any], list[str], list[str]]:
    """Add members to `role` in a v3 policy dict, idempotently: (new_policy, added, already_present).

    Only an unconditional binding counts: a member bound under a condition is not granted everywhere.
    The etag is kept, so the write is a compare-and-set against the policy that was read.
    """
    new = copy.deepcopy(dict(policy))
    new["version"] = 3
    bindings = new.setdefault("bindings", [])
    target = next((b for b in bindings if b.get("role") == role and not b.get("condition")), None)
    existing = set(target.get("members", [])) if target else set()
    added = [m for m in dict.fromkeys(members) if m not in existing]
    already = [m for m in dict.fromkeys(members) if m in existing]
    if added:
        if target is None:
            target = {"role": role, "members": []}
            bindings.append(target)
        target["members"] = sorted(existing | set(added))
    return new, added, already
