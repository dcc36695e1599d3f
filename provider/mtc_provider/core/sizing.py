"""Ramdisk sizing exactly as the guide computes it.

checkpoint = parameters x bytes per parameter (12 by default: weights plus optimizer state)
shard      = checkpoint / hosts in the slice
ramdisk    = 2 x shard, plus a 10-15% buffer (15% by default)

The ramdisk is tmpfs in the TPU host's memory: a ramdisk that does not fit the machine type's memory is refused,
one that takes most of it is reported as a warning (the training process needs that memory too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from mtc_provider.core.errors import SpecError, positive_int

GB = 10**9
GiB = 2**30
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


def ramdisk_size(
    parameters: float | int | str,
    hosts_per_slice: int,
    bytes_per_parameter: float | int | str = DEFAULT_BYTES_PER_PARAMETER,
    buffer: float | str | Decimal = DEFAULT_BUFFER,
    allow_any_buffer: bool = False,
) -> RamdiskSize:
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


def check_fits_host(size: RamdiskSize, machine_type: str, host_memory_bytes: int) -> str | None:
    """Refuse a ramdisk that cannot fit the host's memory; a warning when it takes most of it, else None."""
    ramdisk = size.total_gib_rounded_up * GiB
    memory_gib = host_memory_bytes // GiB
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
    if ramdisk > host_memory_bytes * MOST_OF_HOST_MEMORY:
        share = Decimal(ramdisk) / host_memory_bytes * 100
        return (f"the ramdisk ({size.quantity} per host) takes {share:.0f}% of the {memory_gib} GiB host memory of "
                f"{machine_type}: the training process shares that memory; consider more hosts per slice")
    return None
