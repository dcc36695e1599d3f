from __future__ import annotations

import pytest

from mtc_provider.core.definition.cluster.readiness import evaluate_cluster
from mtc_provider.core.definition.shape.tpu import SliceSpec
from mtc_provider.core.basics.versions import MTC_MIN_VERSION_EXCLUSIVE, GkeVersion, is_later_than

SLICES = SliceSpec("v6e", "2x2", 2)


@pytest.mark.parametrize(
    "version, later",
    [
        ("1.32.3-gke.1170000", False),  # the minimum itself is not enough
        ("1.32.3-gke.1170001", True),
        ("1.32.3-gke.999999", False),  # numeric, not string, comparison (a string compare says True)
        ("1.32.4-gke.1415000", True),  # GKE's minimum for new clusters
        ("1.32.10-gke.1", True),  # "10" > "4" numerically
        ("1.33.0", True),
        ("v1.31.12-gke.99999999", False),
        ("2.0.0-gke.0", True),
    ],
)
def test_is_later_than(version, later) -> None:
    assert is_later_than(version) is later
    # the used path: the readiness check of a cluster that already runs the addon at this version
    cluster = {"currentMasterVersion": version, "addonsConfig": {"highScaleCheckpointingConfig": {"enabled": True}}}
    assert _version_check(cluster).ok is later and _version_check(cluster).observed == version


def _version_check(cluster):
    return next(c for c in evaluate_cluster(cluster, SLICES, "p", "us-east5", None, None)
                if c.name == "control_plane_version")


# A cluster that gets MTC now follows GKE's Multi-Tier Checkpointing page ("requires GKE cluster version
# 1.32.4-gke.1415000 or later"), stricter than the guide's "later than 1.32.3-gke.1170000".
@pytest.mark.parametrize(
    "version, ok",
    [
        ("1.32.3-gke.1170001", False),  # inside the guide's window, below GKE's page
        ("1.32.4-gke.1414999", False),
        ("1.32.4-gke.1415000", True),  # "or later": the minimum itself is enough
        ("1.32.10-gke.1", True),
        ("1.33.0", True),
    ],
)
def test_a_cluster_enabling_mtc_now_needs_gkes_minimum(version, ok) -> None:
    cluster = {"currentMasterVersion": version, "addonsConfig": {"highScaleCheckpointingConfig": {"enabled": False}}}
    check = _version_check(cluster)
    assert check.ok is ok
    assert check.expected.startswith("1.32.4-gke.1415000 or later to enable MTC")
    assert "later than 1.32.3-gke.1170000" in check.expected  # the other source, explained
    enabled = {**cluster, "addonsConfig": {"highScaleCheckpointingConfig": {"enabled": True}}}
    assert "the guide's window applies" in _version_check(enabled).expected


def test_parse_and_str_round_trip() -> None:
    version = GkeVersion.parse(" v1.32.4-gke.1415000 ")
    assert version == GkeVersion(1, 32, 4, 1415000)
    assert str(version) == "1.32.4-gke.1415000"
    assert str(GkeVersion.parse(MTC_MIN_VERSION_EXCLUSIVE)) == MTC_MIN_VERSION_EXCLUSIVE
