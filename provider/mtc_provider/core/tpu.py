"""TPU slice shapes: type, topology, machine type, chips and hosts, and the GKE labels for them."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from mtc_provider.core.errors import SpecError, positive_int


@dataclass(frozen=True)
class TpuType:
    name: str
    accelerator_label: str  # cloud.google.com/gke-tpu-accelerator
    topology_dims: int  # 2 for v5e/v6e (e.g. 4x8), 3 for v4/v5p (e.g. 2x2x2)
    machine_types: dict[str, int]  # machine type -> chips per host
    default_machine_type: str


# The guide's supported TPU types (v4, v5e, v5p, v6e) and their GKE node labels and machine types.
TPU_TYPES: dict[str, TpuType] = {
    "v4": TpuType("v4", "tpu-v4-podslice", 3, {"ct4p-hightpu-4t": 4}, "ct4p-hightpu-4t"),
    "v5e": TpuType(
        "v5e",
        "tpu-v5-lite-podslice",
        2,
        {"ct5lp-hightpu-1t": 1, "ct5lp-hightpu-4t": 4, "ct5lp-hightpu-8t": 8},
        "ct5lp-hightpu-4t",
    ),
    "v5p": TpuType("v5p", "tpu-v5p-slice", 3, {"ct5p-hightpu-4t": 4}, "ct5p-hightpu-4t"),
    "v6e": TpuType(
        "v6e",
        "tpu-v6e-slice",
        2,
        {"ct6e-standard-1t": 1, "ct6e-standard-4t": 4, "ct6e-standard-8t": 8},
        "ct6e-standard-4t",
    ),
}
SUPPORTED_TPU_TYPES = ", ".join(TPU_TYPES)
TOPOLOGY_RE = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*)+$")
MIN_SLICES = 2  # the guide: emergency checkpointing assumes a multi-slice workload


def tpu_type(name: str, field: str = "slices.tpu_type") -> TpuType:
    if name not in TPU_TYPES:
        raise SpecError(field, name, f"one of {SUPPORTED_TPU_TYPES}")
    return TPU_TYPES[name]


def parse_topology(topology: str, dims: int, field: str = "slices.topology") -> tuple[int, ...]:
    example = "2x2x2" if dims == 3 else "4x8"
    if not isinstance(topology, str) or not TOPOLOGY_RE.match(topology):
        raise SpecError(field, topology, f"{dims} positive integers joined by 'x', e.g. {example}")
    sizes = tuple(int(part) for part in topology.split("x"))
    if len(sizes) != dims:
        raise SpecError(field, topology, f"{dims} dimensions for this TPU type, e.g. {example}")
    return sizes


@dataclass(frozen=True)
class SliceSpec:
    """`num_slices` identical TPU slices; each slice is one GKE node pool."""

    tpu_type: str
    topology: str
    num_slices: int
    machine_type: str = ""

    def __post_init__(self) -> None:
        kind = tpu_type(self.tpu_type)
        parse_topology(self.topology, kind.topology_dims)
        if isinstance(self.num_slices, bool) or not isinstance(self.num_slices, int) or self.num_slices < MIN_SLICES:
            raise SpecError("slices.num_slices", self.num_slices, f"an integer >= {MIN_SLICES} (multi-slice)")
        if not self.machine_type:
            object.__setattr__(self, "machine_type", kind.default_machine_type)
        if self.machine_type not in kind.machine_types:
            raise SpecError("slices.machine_type", self.machine_type, f"one of {', '.join(kind.machine_types)}")
        if self.chips_per_slice % self.chips_per_host:
            raise SpecError(
                "slices.topology",
                self.topology,
                f"a chip count divisible by {self.chips_per_host} chips per host of {self.machine_type}",
            )

    @property
    def kind(self) -> TpuType:
        return TPU_TYPES[self.tpu_type]

    @property
    def accelerator_label(self) -> str:
        return self.kind.accelerator_label

    @property
    def chips_per_host(self) -> int:
        return self.kind.machine_types[self.machine_type]

    @property
    def chips_per_slice(self) -> int:
        return math.prod(parse_topology(self.topology, self.kind.topology_dims))

    @property
    def hosts_per_slice(self) -> int:
        return max(1, self.chips_per_slice // self.chips_per_host)

    @property
    def total_hosts(self) -> int:
        return self.hosts_per_slice * self.num_slices


def hosts_per_slice(value: int, field: str = "hosts") -> int:
    return positive_int(field, value)
