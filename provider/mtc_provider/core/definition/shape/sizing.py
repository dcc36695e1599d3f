"""Ramdisk sizing exactly as the guide computes it.

checkpoint = parameters x bytes per parameter (12 by default: weights plus optimizer state)
shard      = checkpoint / hosts in the slice
ramdisk    = 2 x shard, plus a 10-15% buffer (15% by default)

The ramdisk is tmpfs in the TPU host's memory: a ramdisk that does not fit the machine type's memory is refused;
one above the node's allocatable memory (what GKE leaves to pods: `allocatable_memory_bytes`) is refused unless
the run sets `sizing.allow_ramdisk_above_allocatable: true`; one that takes most of the memory is reported as a
warning (the training process needs that memory too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from mtc_provider.core.basics.errors import SpecError, positive_int

GB = 10**9
GiB = 2**30
MiB = 2**20
DEFAULT_BYTES_PER_PARAMETER = 12
DEFAULT_BUFFER = Decimal("0.15")
BUFFER_RANGE = (Decimal("0.10"), Decimal("0.15"))
MOST_OF_HOST_MEMORY = Decimal("0.5")  # above this share of host memory, plans carry a warning


def _decimal(field: str, value: float | int | str | Decimal, allowed: str) -> Decimal:
    try:
        number = Decimal(str(value))
    except Exception as exc:  # decimal.InvalidOperation and friends
        raise SpecError(field, value, allowed) from exc
    if not number.is_finite():
        raise SpecError(field, value, allowed)
    return number


@dataclass(frozen=True)
class RamdiskSize:
    parameters: int
    bytes_per_parameter: Decimal
    hosts_per_slice: int
    buffer: Decimal
    checkpoint_bytes: Decimal
    shard_bytes: Decimal
    doubled_bytes: Decimal
    total_bytes: int  # with the buffer, rounded up to a whole byte

    @property
    def total_gib_rounded_up(self) -> int:
        return math.ceil(Decimal(self.total_bytes) / GiB)

    @property
    def quantity(self) -> str:
        """Kubernetes quantity for CheckpointConfiguration.spec.inMemoryVolumeSize, rounded up to whole GiB."""
        return f"{self.total_gib_rounded_up}Gi"

    def walkthrough(self) -> list[str]:
        """The guide's example calculation, line by line, for these numbers."""
        pct = f"{(self.buffer * 100).normalize():f}"
        return [
            f"Total checkpoint size: {self.parameters:,} parameters x {self.bytes_per_parameter} bytes/parameter"
            f" = {int(self.checkpoint_bytes):,} bytes = {gb(self.checkpoint_bytes)} GB",
            f"Per-host checkpoint shard: {gb(self.checkpoint_bytes)} GB / {self.hosts_per_slice} hosts"
            f" = {gb(self.shard_bytes)} GB per host",
            f"Per-host ramdisk size: {gb(self.shard_bytes)} GB x 2 = {gb(self.doubled_bytes)} GB per host",
            f"With a {pct}% buffer: {gb(self.doubled_bytes)} GB x {1 + self.buffer}"
            f" = {gb(self.total_bytes)} GB ({self.total_bytes:,} bytes)",
            f"inMemoryVolumeSize: {self.quantity} (rounded up to whole GiB; {GiB:,} bytes each)",
        ]


def gb(nbytes: Decimal | int) -> str:
    """Decimal gigabytes (1 GB = 1e9 bytes) without float noise: 26.25, 60.375, 840."""
    text = f"{(Decimal(nbytes) / GB).normalize():f}"
    return text


def ramdisk_size(parameters: float | int | str, hosts_per_slice: int,
                 bytes_per_parameter: float | int | str = DEFAULT_BYTES_PER_PARAMETER,
                 buffer: float | str | Decimal = DEFAULT_BUFFER, allow_any_buffer: bool = False) -> RamdiskSize:
    params = _decimal("sizing.parameters", parameters, "a positive number of parameters, e.g. 70e9")
    if params <= 0 or params != params.to_integral_value():
        raise SpecError("sizing.parameters", parameters, "a positive whole number of parameters, e.g. 70e9")
    hosts = positive_int("sizing.hosts_per_slice", hosts_per_slice)
    per_param = _decimal("sizing.bytes_per_parameter", bytes_per_parameter, "a positive number of bytes, e.g. 12")
    if per_param <= 0:
        raise SpecError("sizing.bytes_per_parameter", bytes_per_parameter, "a positive number of bytes, e.g. 12")
    buf = _decimal("sizing.buffer", buffer, "a fraction between 0.10 and 0.15")
    low, high = BUFFER_RANGE
    if allow_any_buffer:
        if buf < 0 or buf > 1:
            raise SpecError("sizing.buffer", buffer, "a fraction between 0 and 1")
    elif not low <= buf <= high:
        raise SpecError("sizing.buffer", buffer, "a fraction between 0.10 and 0.15 (the guide's advice; another "
                        "value needs sizing.allow_any_buffer: true, or --allow-any-buffer on the command line)")
    checkpoint = params * per_param
    shard = checkpoint / hosts
    doubled = shard * 2
    total = math.ceil(doubled * (1 + buf))
    return RamdiskSize(int(params), per_param, hosts, buf, checkpoint, shard, doubled, total)


# GKE reserves memory on every Standard node for the kubelet, the container runtime and the OS, and keeps an
# eviction threshold free: what is left is the node's allocatable memory, all that pods (and a tmpfs volume, whose
# pages are charged to the pod) may use. GKE "Plan GKE Standard node sizes", "Node allocatable resources"
# (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes#memory_and_cpu_reservations):
# 255 MiB on machines under 1 GiB; else 25% of the first 4 GiB, 20% of the next 4 GiB (up to 8), 10% of the next
# 8 GiB (up to 16), 6% of the next 112 GiB (up to 128) and 2% of any memory above 128 GiB; plus a 100 MiB eviction
# threshold.
MEMORY_RESERVATION_TIERS: tuple[tuple[int | None, Decimal], ...] = (
    (4, Decimal("0.25")), (8, Decimal("0.20")), (16, Decimal("0.10")), (128, Decimal("0.06")), (None, Decimal("0.02")))
SMALL_MACHINE_RESERVATION_BYTES = 255 * MiB
EVICTION_THRESHOLD_BYTES = 100 * MiB
ALLOCATABLE_DOC = "https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes"


def allocatable_memory_bytes(memory_bytes: int) -> int:
    """The memory GKE leaves to pods on a node with `memory_bytes` (its reservation formula, above): about 698.7 GiB
    of 720 on ct6e-standard-4t, 432.2 of 448 on ct5p-hightpu-4t, 181.3 of 192 on ct5lp-hightpu-4t."""
    if memory_bytes < GiB:
        reserved = Decimal(SMALL_MACHINE_RESERVATION_BYTES)
    else:
        reserved, floor = Decimal(0), 0
        for ceiling, share in MEMORY_RESERVATION_TIERS:
            top = memory_bytes if ceiling is None else min(memory_bytes, ceiling * GiB)
            if top > floor:
                reserved += (top - floor) * share
            floor = top if ceiling is None else ceiling * GiB
    return int(memory_bytes - reserved) - EVICTION_THRESHOLD_BYTES


def check_fits_host(size: RamdiskSize, machine_type: str, host_memory_bytes: int,
                    allow_above_allocatable: bool = False) -> str | None:
    """Refuse a ramdisk that cannot fit the host's memory, or one above the node's allocatable memory unless
    `allow_above_allocatable`; a warning when it takes most of the memory (or is above allocatable, allowed)."""
    ramdisk = size.total_gib_rounded_up * GiB
    memory_gib = host_memory_bytes // GiB
    allocatable = allocatable_memory_bytes(host_memory_bytes)
    allocatable_gib = f"{Decimal(allocatable) / GiB:.1f}"
    if ramdisk >= host_memory_bytes:
        # The largest model whose ramdisk still fits: memory = 2 x (params x bytes / hosts) x (1 + buffer).
        largest = int(Decimal(host_memory_bytes) * size.hosts_per_slice
                      / (2 * size.bytes_per_parameter * (1 + size.buffer)))
        raise SpecError(
            "sizing.parameters",
            size.parameters,
            f"a model whose ramdisk per host fits the {memory_gib} GiB host memory of {machine_type} (this one needs "
            f"{size.quantity}): fewer than {largest:,} parameters with {size.hosts_per_slice} hosts per slice, "
            "or more hosts per slice",
        )
    if ramdisk > allocatable:
        above = (f"the ramdisk ({size.quantity} per host) is above the {allocatable_gib} GiB of the {memory_gib} GiB "
                 f"host memory of {machine_type} that GKE leaves to pods (node allocatable, {ALLOCATABLE_DOC})")
        if not allow_above_allocatable:
            largest = int(Decimal(allocatable) * size.hosts_per_slice
                          / (2 * size.bytes_per_parameter * (1 + size.buffer)))
            raise SpecError(
                "sizing.parameters", size.parameters,
                f"a model whose ramdisk per host fits the node's allocatable memory: {above}; fewer than "
                f"{largest:,} parameters with {size.hosts_per_slice} hosts per slice, more hosts per slice, or "
                "sizing.allow_ramdisk_above_allocatable: true if your nodes really leave more memory to pods",
            )
        return f"{above}: allowed by sizing.allow_ramdisk_above_allocatable; the pods may not start (FailedMount)"
    if ramdisk > host_memory_bytes * MOST_OF_HOST_MEMORY:
        share = Decimal(ramdisk) / host_memory_bytes * 100
        return (f"the ramdisk ({size.quantity} per host) takes {share:.0f}% of the {memory_gib} GiB host memory of "
                f"{machine_type}: the training process shares that memory; consider more hosts per slice")
    return None
