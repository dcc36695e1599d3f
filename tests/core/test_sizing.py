from __future__ import annotations

from decimal import Decimal

import pytest

from mtc_provider.core.sizing import GB, gb, ramdisk_size


def test_the_guides_worked_example_exactly() -> None:
    size = ramdisk_size(70e9, 32)
    assert size.checkpoint_bytes == 840 * GB
    assert gb(size.checkpoint_bytes) == "840"
    assert gb(size.shard_bytes) == "26.25"
    assert gb(size.doubled_bytes) == "52.5"
    assert gb(size.total_bytes) == "60.375"
    assert size.total_bytes == 60_375_000_000
    # 60.375e9 bytes = 56.23 GiB -> 57Gi: at least the guide's "at least 60 GB".
    assert size.quantity == "57Gi"
    assert size.total_gib_rounded_up * 2**30 >= 60 * GB


def test_walkthrough_lines_follow_the_guide() -> None:
    lines = ramdisk_size("70e9", 32).walkthrough()
    assert lines[0] == (
        "Total checkpoint size: 70,000,000,000 parameters x 12 bytes/parameter = 840,000,000,000 bytes = 840 GB"
    )
    assert lines[1] == "Per-host checkpoint shard: 840 GB / 32 hosts = 26.25 GB per host"
    assert lines[2] == "Per-host ramdisk size: 26.25 GB x 2 = 52.5 GB per host"
    assert lines[3] == "With a 15% buffer: 52.5 GB x 1.15 = 60.375 GB (60,375,000,000 bytes)"
    assert lines[4].startswith("inMemoryVolumeSize: 57Gi")


@pytest.mark.parametrize(
    "params, hosts, per_param, buffer, total_bytes, quantity",
    [
        (1e9, 1, 12, "0.15", 27_600_000_000, "26Gi"),  # the guide's 1B model: 12 GB checkpoint
        (70e9, 32, 12, "0.10", 57_750_000_000, "54Gi"),
        (70e9, 8, 12, "0.15", 241_500_000_000, "225Gi"),
        (8e9, 2, 16, "0.15", 147_200_000_000, "138Gi"),
        (7, 3, 1, "0.15", 6, "1Gi"),  # rounded up to a whole byte, then a whole GiB
    ],
)
def test_sizing_table(params, hosts, per_param, buffer, total_bytes, quantity) -> None:
    size = ramdisk_size(params, hosts, per_param, buffer)
    assert size.total_bytes == total_bytes
    assert size.quantity == quantity


def test_buffer_outside_the_guides_range_needs_opt_in() -> None:
    assert ramdisk_size(70e9, 32, buffer=0, allow_any_buffer=True).total_bytes == 52_500_000_000
    assert ramdisk_size(70e9, 32, buffer="0.10").buffer == Decimal("0.10")


def test_walkthrough_prints_a_ten_percent_buffer() -> None:
    assert ramdisk_size(70e9, 32, buffer="0.10").walkthrough()[3].startswith("With a 10% buffer")
