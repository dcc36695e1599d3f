"""TPU slice shapes: type, topology, machine type, chips and hosts, and the GKE labels for them.

One table per TPU type of the slice shapes GKE offers (topology, machine type, hosts), so a shape GKE cannot
create is refused here, before the bucket and IAM steps, instead of failing at node-pool creation.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterator

from mtc_provider.core.basics.errors import SpecError

PLAN_TPUS = "GKE, 'Plan TPUs in GKE' (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus)"


@dataclass(frozen=True)
class SliceShape:
    """One row of a topology table: a topology on a machine type, and the hosts (VMs) of one slice."""

    topology: str
    machine_type: str
    chips: int
    hosts: int

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1


@dataclass(frozen=True)
class CubeRule:
    """v4 and v5p topologies beyond the listed ones: AxBxC with A <= B <= C, each a multiple of 4 (whole
    4x4x4 cubes), at most `max_chips` chips; 4 chips per host."""

    machine_type: str
    max_chips: int
    examples: str

    def shape(self, sizes: tuple[int, ...]) -> SliceShape | None:
        chips = math.prod(sizes)
        ordered = list(sizes) == sorted(sizes)
        if len(sizes) == 3 and ordered and all(size % 4 == 0 for size in sizes) and chips <= self.max_chips:
            return SliceShape("x".join(map(str, sizes)), self.machine_type, chips, chips // 4)
        return None


@dataclass(frozen=True)
class TpuType:
    name: str
    accelerator_label: str  # cloud.google.com/gke-tpu-accelerator
    topology_dims: int  # 2 for v5e/v6e (e.g. 4x8), 3 for v4/v5p (e.g. 2x2x2)
    machine_types: dict[str, int]  # machine type -> chips per host
    default_machine_type: str
    shapes: tuple[SliceShape, ...]  # the topology table
    cubes: CubeRule | None = None

    def offered(self, topology: str) -> list[SliceShape]:
        """The table's rows for this topology (several when machine types differ, e.g. v6e 2x4)."""
        rows = [shape for shape in self.shapes if shape.topology == topology]
        if not rows and self.cubes is not None:
            sizes = tuple(int(part) for part in topology.split("x"))
            cube = self.cubes.shape(sizes)
            rows = [cube] if cube else []
        return rows

    def describe(self, only_multi_host: bool = False) -> str:
        """The table as a sentence: `1x1 (ct6e-standard-1t, 1 host), 2x4 (ct6e-standard-8t, 1 host; ...`."""
        parts = []
        for topology in dict.fromkeys(shape.topology for shape in self.shapes):
            rows = [s for s in self.offered(topology) if s.multi_host or not only_multi_host]
            if rows:
                hosts = "; ".join(f"{s.machine_type}, {s.hosts} host{'s' if s.hosts > 1 else ''}" for s in rows)
                parts.append(f"{topology} ({hosts})")
        text = ", ".join(parts)
        if self.cubes is not None:
            text += (f", or AxBxC with A <= B <= C, each a multiple of 4, at most {self.cubes.max_chips} chips "
                     f"({self.cubes.machine_type}, chips / 4 hosts; e.g. {self.cubes.examples})")
        return text


def _rows(machine_type: str, chips_per_host: int, topologies: tuple[str, ...]) -> tuple[SliceShape, ...]:
    shapes = []
    for topology in topologies:
        chips = math.prod(int(part) for part in topology.split("x"))
        shapes.append(SliceShape(topology, machine_type, chips, max(1, chips // chips_per_host)))
    return tuple(shapes)


# The tables: GKE, "Plan TPUs in GKE", section "Choose the TPU topology" (one table per TPU version: machine type,
# topology, number of TPU chips, number of VMs, single-host or multi-host). Cross-checked against Cloud TPU's
# "TPU v6e", "TPU v5e", "TPU v5p" and "TPU v4" configuration pages and xpk's system_characteristics.py
# (AI-Hypercomputer/xpk src/xpk/core/system_characteristics.py@v1.13.1). The 2D pod shapes (v5e, v6e):
_POD_2D = ("4x4", "4x8", "8x8", "8x16", "16x16")
# The 3D shapes below one cube (v4, v5p): 2x2x1 is one host; larger ones follow CubeRule.
_SMALL_3D = ("2x2x1", "2x2x2", "2x2x4", "2x4x4")


def _cube_type(name: str, accelerator: str, machine_type: str, max_chips: int, examples: str) -> TpuType:
    """v4 and v5p: one machine type of 4 chips per host; the shapes below one cube, then whole cubes (CubeRule)."""
    return TpuType(name, accelerator, 3, {machine_type: 4}, machine_type, _rows(machine_type, 4, _SMALL_3D),
                   CubeRule(machine_type, max_chips, examples))


def _pod_2d_type(name: str, accelerator: str, machine_prefix: str) -> TpuType:
    """v5e and v6e, whose tables are alike row for row: machine types `<prefix>-1t`, `-4t` (the default) and `-8t`;
    1x1 on 1t, 2x2 on 4t, 2x4 on 8t (one host) or on 4t (two hosts), and the pod shapes on 4t."""
    one, four, eight = (f"{machine_prefix}-{chips}t" for chips in (1, 4, 8))
    return TpuType(name, accelerator, 2, {one: 1, four: 4, eight: 8}, four,
                   _rows(one, 1, ("1x1",)) + _rows(four, 4, ("2x2",)) + _rows(eight, 8, ("2x4",))
                   + _rows(four, 4, ("2x4", *_POD_2D)))


TPU_TYPES: dict[str, TpuType] = {
    # A v4 Pod is 4096 chips (Cloud TPU "TPU v4"); GKE's largest v4 slice node pool is the same.
    "v4": _cube_type("v4", "tpu-v4-podslice", "ct4p-hightpu-4t", 4096, "4x4x4, 4x4x8, 8x8x8, 16x16x16"),
    "v5e": _pod_2d_type("v5e", "tpu-v5-lite-podslice", "ct5lp-hightpu"),
    # Cloud TPU "TPU v5p": the largest single slice is 16x16x24 (96 cubes, 6144 chips).
    "v5p": _cube_type("v5p", "tpu-v5p-slice", "ct5p-hightpu-4t", 6144, "4x4x4, 4x4x8, 8x8x8, 16x16x24"),
    "v6e": _pod_2d_type("v6e", "tpu-v6e-slice", "ct6e-standard"),
}
SUPPORTED_TPU_TYPES = ", ".join(TPU_TYPES)

# Host memory (GiB) of each machine type: GKE, "Plan TPUs in GKE", table "Choose the TPU version"
# (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus#choose-tpu-version), column "Memory (GiB)".
# The v5e rows also match Cloud TPU's "TPU v5e" VM types (RAM 48/192/384), v5p matches Cloud TPU's "TPU v5p"
# (448 per 4-chip VM); the v4 row (407) could not be read again in the stored copies (see docs/troubleshooting.md).
# The ramdisk is tmpfs in this memory, shared with the training process itself.
HOST_MEMORY_GIB: dict[str, int] = {"ct4p-hightpu-4t": 407, "ct5lp-hightpu-1t": 48, "ct5lp-hightpu-4t": 192,
                                   "ct5lp-hightpu-8t": 384, "ct5p-hightpu-4t": 448, "ct6e-standard-1t": 448,
                                   "ct6e-standard-4t": 720, "ct6e-standard-8t": 1440}

TOPOLOGY_RE = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*)+$")
MIN_SLICES = 2  # the guide: emergency checkpointing assumes a multi-slice workload
# GKE, "Deploy TPU Multislices in GKE" (https://cloud.google.com/tpu/docs/tpu-gke-multislice), "Multislice
# availability in GKE": its own words, shown in the refusal.
MULTISLICE_RULE = "Multislice only supports multi-host TPU slice node pools"
# On a kind whose slices are GKE TPU node pools (its rules' node_pools) the Multislice rule applies. The local target
# runs processes; a kubernetes target is any cluster with JobSet (the local API server too), whose nodes this
# provider cannot see.


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
        offered = kind.offered(self.topology)
        if not offered:
            raise SpecError("slices.topology", self.topology,
                            f"a topology GKE offers for {kind.name}: {kind.describe()} ({PLAN_TPUS})")
        if not self.machine_type:  # the only machine type of that topology, else the multi-host one
            machines = {shape.machine_type for shape in offered}
            object.__setattr__(self, "machine_type", machines.pop() if len(machines) == 1 else kind.default_machine_type)
        if self.machine_type not in kind.machine_types:
            raise SpecError("slices.machine_type", self.machine_type, f"one of {', '.join(kind.machine_types)}")
        if self.machine_type not in {shape.machine_type for shape in offered}:
            raise SpecError("slices.machine_type", self.machine_type, self._machine_types_for(offered))

    def _machine_types_for(self, offered: list[SliceShape]) -> str:
        machines = ", ".join(shape.machine_type for shape in offered)
        chips = offered[0].chips
        if all(shape.multi_host for shape in offered):
            return (f"for topology {self.topology} ({chips} chips, more than one host) a multi-host machine type: "
                    f"{machines} ({self.machine_type} exists only as a single host of "
                    f"{self.kind.machine_types[self.machine_type]} chips; {PLAN_TPUS})")
        return f"for topology {self.topology} ({chips} chips) the machine type GKE offers: {machines} ({PLAN_TPUS})"

    @property
    def kind(self) -> TpuType:
        return TPU_TYPES[self.tpu_type]

    @property
    def shape(self) -> SliceShape:
        return next(s for s in self.kind.offered(self.topology) if s.machine_type == self.machine_type)

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
        return self.shape.hosts

    @property
    def host_memory_bytes(self) -> int:
        return HOST_MEMORY_GIB[self.machine_type] * 2**30

    @property
    def total_hosts(self) -> int:
        return self.hosts_per_slice * self.num_slices


def multi_host_shapes(kind: TpuType) -> Iterator[SliceShape]:
    return (shape for shape in kind.shapes if shape.multi_host)


def check_multislice(slices: SliceSpec, target: str) -> None:
    """On a target whose slices are GKE node pools, refuse a single-host slice (GKE's Multislice rule); the local
    target runs single-host slices as processes, and keeps them for speed."""
    from mtc_provider.core.basics.kind_rules import rules_for

    if slices.shape.multi_host or not rules_for(target).node_pools:
        return
    smallest = next(multi_host_shapes(slices.kind))
    raise SpecError(
        "slices.topology", slices.topology,
        f"a multi-host slice on the {target} target ({slices.topology} on {slices.machine_type} is one host; GKE: "
        f"'{MULTISLICE_RULE}', https://cloud.google.com/tpu/docs/tpu-gke-multislice): for {slices.tpu_type} "
        f"{slices.kind.describe(only_multi_host=True)}; the smallest is {smallest.topology} on "
        f"{smallest.machine_type} ({smallest.hosts} hosts); the local target also runs single-host slices",
    )


def default_topology(tpu_type_name: str, machine_type: str, node_pools: bool) -> str:
    """The smallest topology of the TPU type on the machine type (its default when empty) that the target takes:
    one host locally (fast), the smallest multi-host slice where GKE's Multislice rule applies."""
    kind = tpu_type(tpu_type_name)
    machine = machine_type or kind.default_machine_type
    rows = [shape for shape in kind.shapes if shape.machine_type == machine] or list(kind.shapes)
    if node_pools:  # the target's slices are GKE node pools (its kind's rules)
        rows = [shape for shape in rows if shape.multi_host] or rows
    return min(rows, key=lambda shape: shape.chips).topology
