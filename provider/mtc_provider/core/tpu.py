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

# Host memory (GiB) of each machine type: GKE, "Plan TPUs in GKE", table "Choose the TPU version"
# (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus#choose-tpu-version), column "Memory (GiB)".
# (The v5e rows also match Compute Engine's machine-type list.) The ramdisk is tmpfs in this memory, shared
# with the training process itself.
HOST_MEMORY_GIB: dict[str, int] = {
    "ct4p-hightpu-4t": 407,
    "ct5lp-hightpu-1t": 48,
    "ct5lp-hightpu-4t": 192,
    "ct5lp-hightpu-8t": 384,
    "ct5p-hightpu-4t": 448,
    "ct6e-standard-1t": 448,
    "ct6e-standard-4t": 720,
    "ct6e-standard-8t": 1440,
}

# Machine types that exist only as a single-host slice: every chip of the slice on one VM. GKE, "Plan TPUs in
# GKE", "Choose the TPU topology" (v5e and v6e tables), and Cloud TPU "TPU v6e" / "TPU v5e" supported
# configurations: 1x1 runs on the -1t types, 2x4 on the -8t types as one host; multi-host topologies use the -4t
# types only.
SINGLE_HOST_ONLY = frozenset({"ct5lp-hightpu-1t", "ct5lp-hightpu-8t", "ct6e-standard-1t", "ct6e-standard-8t"})
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
        if self.machine_type in SINGLE_HOST_ONLY and self.chips_per_slice != self.chips_per_host:
            multi_host = [m for m in kind.machine_types if m not in SINGLE_HOST_ONLY]
            raise SpecError(
                "slices.machine_type",
                self.machine_type,
                f"for topology {self.topology} ({self.chips_per_slice} chips, more than one host) a multi-host "
                f"machine type: {', '.join(multi_host)} ({self.machine_type} exists only as a single host of "
                f"{self.chips_per_host} chips)",
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
    def host_memory_bytes(self) -> int:
        return HOST_MEMORY_GIB[self.machine_type] * 2**30

    @property
    def total_hosts(self) -> int:
        return self.hosts_per_slice * self.num_slices


def hosts_per_slice(value: int, field: str = "hosts") -> int:
    return positive_int(field, value)
