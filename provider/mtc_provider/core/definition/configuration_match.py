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
from typing import Any, Mapping

from mtc_provider.core.definition.checkpoint_config import INSTANCE_TYPE_LABEL
from mtc_provider.core.definition.sizing import RamdiskSize

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


def configuration_mismatches(configuration: Mapping[str, Any], machine_type: str, bucket_name: str | None,
                             ramdisk: RamdiskSize | None) -> list[str]:
    """One line per field of `configuration` that does not serve the run: field, value, what the run expects.

    `bucket_name` None or `ramdisk` None skips that check (the caller does not know it)."""
    spec = configuration.get("spec") or {}
    problems = []
    selector = spec.get("nodeSelector") or {}
    selected = selector.get(INSTANCE_TYPE_LABEL)
    if selected != machine_type:
        problems.append(f"spec.nodeSelector[{INSTANCE_TYPE_LABEL}]: {selected!r} (nodeSelector {dict(selector)}); "
                        f"expected {machine_type!r}, the machine type of the run's slices (the MTC CSI driver only "
                        "mounts the ramdisk on the nodes it selects)")
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
