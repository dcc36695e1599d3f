from __future__ import annotations

import pytest

from mtc_provider.core.definition.shape.tpu import TPU_TYPES, SliceSpec, parse_topology


@pytest.mark.parametrize(
    "tpu_type, topology, machine_type, accelerator, chips_per_host, hosts",
    [
        ("v6e", "4x8", "", "tpu-v6e-slice", 4, 8),
        ("v6e", "8x16", "ct6e-standard-4t", "tpu-v6e-slice", 4, 32),  # the guide: 8x16 is 32 hosts
        ("v6e", "2x4", "ct6e-standard-8t", "tpu-v6e-slice", 8, 1),
        ("v5e", "4x4", "", "tpu-v5-lite-podslice", 4, 4),
        ("v5e", "1x1", "ct5lp-hightpu-1t", "tpu-v5-lite-podslice", 1, 1),
        ("v5e", "2x4", "ct5lp-hightpu-8t", "tpu-v5-lite-podslice", 8, 1),
        ("v5e", "2x4", "ct5lp-hightpu-4t", "tpu-v5-lite-podslice", 4, 2),
        ("v5p", "2x2x2", "", "tpu-v5p-slice", 4, 2),
        ("v5p", "2x2x4", "", "tpu-v5p-slice", 4, 4),
        ("v4", "2x2x4", "", "tpu-v4-podslice", 4, 4),
    ],
)
def test_slice_shapes(tpu_type, topology, machine_type, accelerator, chips_per_host, hosts) -> None:
    spec = SliceSpec(tpu_type, topology, 2, machine_type)
    assert spec.accelerator_label == accelerator
    assert spec.chips_per_host == chips_per_host
    assert spec.hosts_per_slice == hosts
    assert spec.total_hosts == 2 * hosts
    assert spec.machine_type in TPU_TYPES[tpu_type].machine_types


def test_default_machine_type_is_filled_in() -> None:
    assert SliceSpec("v6e", "4x8", 2).machine_type == "ct6e-standard-4t"


@pytest.mark.parametrize("text, dims, sizes", [("4x8", 2, (4, 8)), ("2x2x2", 3, (2, 2, 2)), ("16x16", 2, (16, 16))])
def test_parse_topology(text, dims, sizes) -> None:
    assert parse_topology(text, dims) == sizes
