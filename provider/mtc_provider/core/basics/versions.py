"""GKE version strings (`1.32.3-gke.1170000`), compared numerically, never as strings."""

from __future__ import annotations

import re
from dataclasses import dataclass

from mtc_provider.core.basics.errors import SpecError

GKE_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-gke\.(\d+))?$")
# The guide: "GKE cluster version needs to be later than 1.32.3-gke.1170000".
MTC_MIN_VERSION_EXCLUSIVE = "1.32.3-gke.1170000"


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

