from __future__ import annotations

from decimal import Decimal

import pytest

from mtc_provider.core.definition.shape.sizing import GB, gb, ramdisk_size


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


# GKE "Plan GKE Standard node sizes", node allocatable resources: the reservation formula gives these figures
# (facts.md: about 698.7 of 720 GiB, 432.2 of 448, 181.3 of 192).
@pytest.mark.parametrize("memory_gib, allocatable_gib", [(720, "698.7"), (448, "432.2"), (192, "181.3"),
                                                         (48, "43.4")])
def test_allocatable_memory_follows_gkes_reservation_formula(memory_gib, allocatable_gib) -> None:
    from mtc_provider.core.definition.shape.sizing import allocatable_memory_bytes

    assert f"{Decimal(allocatable_memory_bytes(memory_gib * 2**30)) / 2**30:.1f}" == allocatable_gib


def test_a_ramdisk_above_allocatable_memory_is_refused_unless_allowed() -> None:
    from mtc_provider.core.basics.errors import SpecError
    from mtc_provider.core.definition.shape.sizing import check_fits_host

    # 55.2e9 parameters on 2 hosts: 710Gi per host, above 698.7 GiB allocatable of 720 GiB (ct6e-standard-4t).
    size = ramdisk_size(55.2e9, 2)
    assert size.quantity == "710Gi"
    with pytest.raises(SpecError) as refused:
        check_fits_host(size, "ct6e-standard-4t", 720 * 2**30)
    assert refused.value.field == "sizing.parameters"
    assert "698.7 GiB of the 720 GiB" in refused.value.allowed
    assert "sizing.allow_ramdisk_above_allocatable: true" in refused.value.allowed
    warning = check_fits_host(size, "ct6e-standard-4t", 720 * 2**30, allow_above_allocatable=True)
    assert warning and "allowed by sizing.allow_ramdisk_above_allocatable" in warning
    # just below allocatable: a warning only (most of the memory), as before
    assert "takes" in check_fits_host(ramdisk_size(54e9, 2), "ct6e-standard-4t", 720 * 2**30)


def test_the_override_is_a_field_of_the_run_description() -> None:
    from mtc_provider.core.basics.errors import SpecError
    from mtc_provider.core.definition.description.spec import SizingSpec

    assert SizingSpec(allow_ramdisk_above_allocatable=True).allow_ramdisk_above_allocatable
    with pytest.raises(SpecError, match="sizing.allow_ramdisk_above_allocatable: 'yes'"):
        SizingSpec(allow_ramdisk_above_allocatable="yes")
