"""Does a CheckpointConfiguration serve this run? (pure) Its node selector, bucket and ramdisk size against the run's.

A CheckpointConfiguration (GKE MTC; schema: the CRD in tests/data/third_party) tells the MTC CSI driver which
nodes get a ramdisk (`spec.nodeSelector`, typically `node.kubernetes.io/instance-type: <machine type>`), how big it
is (`spec.inMemoryVolumeSize`, a quantity) and which bucket backs it (`spec.cloudStorageBucketName`). One that
selects other nodes, backs up to another bucket or is smaller than the run's ramdisk leaves the run's pods in
ContainerCreating (FailedMount) or its checkpoints where the run does not look: readiness reports each mismatch
as field, value and what the run expects.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping, Sequence

from mtc_provider.core.definition.render.checkpoint_config import INSTANCE_TYPE_LABEL
from mtc_provider.core.definition.shape.sizing import RamdiskSize
from mtc_provider.core.definition.shape.tpu import SliceSpec

# Kubernetes quantities (https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/):
# binary suffixes Ki..Ei, decimal k..E (and m, milli), or a decimal exponent (e.g. 1e9).
_SUFFIX = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")


def quantity_bytes(value: Any) -> int | None:
    """The bytes a Kubernetes quantity string stands for (rounded up), or None when it is not one."""
    found = _QUANTITY.match(str(value).strip()) if isinstance(value, (str, int)) else None
    if not found:
        return None
    number, exponent, suffix = found.groups()
    try:
        amount = Decimal(number + (exponent or "")) * Decimal(_SUFFIX[suffix or ""])
    except InvalidOperation:
        return None
    return int(amount.to_integral_value(rounding="ROUND_CEILING"))


# Labels GKE puts on every node of a TPU node pool (GKE "Plan TPUs in GKE" / "Deploy TPU workloads": the
# accelerator and topology selectors; Kubernetes' well-known `node.kubernetes.io/instance-type`, `kubernetes.io/os`,
# `kubernetes.io/arch`; GKE's `cloud.google.com/gke-nodepool` and `cloud.google.com/machine-family`), and a pool's own
# `config.labels` (NodeConfig.labels: "applied to all nodes"). A selector key outside them cannot be confirmed.
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"


def run_node_labels(slices: SliceSpec, pools: Sequence[Mapping[str, Any]] | None = None) -> list[dict[str, str]]:
    """The labels the run's nodes will carry: one set per node pool of the slices' shape (Container API JSON), or,
    when the pools are not known (a plain Kubernetes connection, pools not created yet), one set without the pool's
    name and labels."""
    common = {INSTANCE_TYPE_LABEL: slices.machine_type, ACCELERATOR_LABEL: slices.accelerator_label,
              TOPOLOGY_LABEL: slices.topology, "cloud.google.com/machine-family": slices.machine_type.split("-")[0],
              "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    if not pools:
        return [common]
    return [{**((pool.get("config") or {}).get("labels") or {}), **common, NODE_POOL_LABEL: pool.get("name", "")}
            for pool in pools]


def selector_mismatches(selector: Mapping[str, Any], nodes: Sequence[Mapping[str, str]], pools_known: bool) -> list[str]:
    """One line per entry of a CheckpointConfiguration's `spec.nodeSelector` (a map: every entry must equal the
    node's label, as a Pod's nodeSelector) that a node of the run does not satisfy, or that cannot be confirmed."""
    problems = []
    for key, value in selector.items():
        if all(node.get(key) == value for node in nodes):
            continue
        seen = sorted({node[key] for node in nodes if key in node})
        if key == NODE_POOL_LABEL and not pools_known:
            reason = "the run's node pools are not known here (none of the slices' shape yet, or no Container API)"
        elif not seen:
            reason = (f"a label the run's nodes are not known to carry (they carry "
                      f"{', '.join(sorted(set().union(*nodes)))})")
        else:
            reason = f"the run's nodes carry {', '.join(map(repr, seen))}"
        problems.append(f"spec.nodeSelector[{key}]: {value!r} (nodeSelector {dict(selector)}); {reason}, so the MTC "
                        f"CSI driver would not mount the ramdisk on the run's nodes (expected a selector every node "
                        f"of the run matches, e.g. {INSTANCE_TYPE_LABEL}: {nodes[0][INSTANCE_TYPE_LABEL]!r})")
    return problems


def configuration_mismatches(configuration: Mapping[str, Any], slices: SliceSpec, bucket_name: str | None,
                             ramdisk: RamdiskSize | None, pools: Sequence[Mapping[str, Any]] | None = None) -> list[str]:
    """One line per field of `configuration` that does not serve the run: field, value, what the run expects.

    `pools`: the node pools the run's slices go to (readiness on GKE), so a selector naming a pool is judged;
    `bucket_name` None or `ramdisk` None skips that check (the caller does not know it)."""
    spec = configuration.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    problems = selector_mismatches(selector, run_node_labels(slices, pools), bool(pools))
    bucket = spec.get("cloudStorageBucketName")
    if bucket_name is not None and bucket != bucket_name:
        problems.append(f"spec.cloudStorageBucketName: {bucket!r}; expected {bucket_name!r}, the run's bucket (MTC "
                        "backs the ramdisk up to that bucket)")
    if ramdisk is not None:
        size = spec.get("inMemoryVolumeSize")
        have = quantity_bytes(size)
        need = ramdisk.total_gib_rounded_up * 2**30
        if have is None or have < need:
            problems.append(f"spec.inMemoryVolumeSize: {size!r}; expected at least {ramdisk.quantity}, this run's "
                            f"ramdisk per host ({ramdisk.parameters:,} parameters x {ramdisk.bytes_per_parameter} "
                            f"bytes over {ramdisk.hosts_per_slice} hosts, doubled, +{ramdisk.buffer * 100:.0f}%)")
    return problems
