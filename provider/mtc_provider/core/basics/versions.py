"""GKE version strings (`1.32.3-gke.1170000`), compared numerically, never as strings."""

from __future__ import annotations

import re
from dataclasses import dataclass

from mtc_provider.core.basics.errors import SpecError

GKE_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-gke\.(\d+))?$")
# Two sources, two minimums:
# - the emergency checkpointing guide: "GKE cluster version needs to be later than 1.32.3-gke.1170000" (its example
#   then sets GKE_VERSION=1.32.4-gke.1415000, "minimum for new clusters");
# - GKE's Multi-Tier Checkpointing page (https://cloud.google.com/kubernetes-engine/docs/how-to/machine-learning/
#   training/multi-tier-checkpointing, "Requirements"): "requires GKE cluster version 1.32.4-gke.1415000 or later".
# A cluster that is to get MTC now (its HighScaleCheckpointing addon is not enabled yet) follows the stricter, GKE's;
# one already running the addon that GKE enabled is held to the guide's window.
MTC_MIN_VERSION_EXCLUSIVE = "1.32.3-gke.1170000"
MTC_MIN_VERSION_NEW = "1.32.4-gke.1415000"


@dataclass(frozen=True, order=True)
class GkeVersion:
    major: int
    minor: int
    patch: int
    gke_build: int = 0

    @classmethod
    def parse(cls, text: str, field: str = "cluster_version") -> "GkeVersion":
        match = GKE_VERSION_RE.match(str(text).strip())
        if not match:
            raise SpecError(field, text, "a GKE version like 1.32.4-gke.1415000 (MAJOR.MINOR.PATCH[-gke.BUILD])")
        major, minor, patch, build = match.groups()
        return cls(int(major), int(minor), int(patch), int(build or 0))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}-gke.{self.gke_build}"


def is_later_than(version: str, minimum: str = MTC_MIN_VERSION_EXCLUSIVE) -> bool:
    """Strictly later: the minimum itself is not enough."""
    return GkeVersion.parse(version) > GkeVersion.parse(minimum, field="minimum_version")



def is_at_least(version: str, minimum: str = MTC_MIN_VERSION_NEW) -> bool:
    """At or after `minimum` (GKE's page says "or later")."""
    return GkeVersion.parse(version) >= GkeVersion.parse(minimum, field="minimum_version")


def mtc_version_window(version: str, enabling: bool) -> tuple[bool, str]:
    """(the control plane's `version` may run MTC, what is needed and why), compared numerically.

    `enabling`: MTC is to be turned on now (a new cluster, or the addon not enabled yet): GKE's page's
    1.32.4-gke.1415000 or later. Otherwise the addon already runs: the guide's later than 1.32.3-gke.1170000."""
    sources = (f"GKE's Multi-Tier Checkpointing page requires {MTC_MIN_VERSION_NEW} or later; the emergency "
               f"checkpointing guide says later than {MTC_MIN_VERSION_EXCLUSIVE}")
    try:
        if enabling:
            return is_at_least(version), (f"{MTC_MIN_VERSION_NEW} or later to enable MTC ({sources}: a cluster that "
                                          "gets MTC now follows the stricter)")
        return is_later_than(version), (f"later than {MTC_MIN_VERSION_EXCLUSIVE} (the HighScaleCheckpointing addon is "
                                        f"already enabled: the guide's window applies; {sources}, which a new "
                                        "cluster needs)")
    except SpecError:
        return False, f"a GKE version ({sources})"
