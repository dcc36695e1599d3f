"""The gke target's room: a GKE cluster (target.py), its Container API control plane (cluster.py) and its backend
(backend.py: the cluster's Kubernetes API through the google provider's hooks, GCS with the target's connection and
impersonation chain, Cloud Console links). Registered as `gke` in the `mtc_provider.targets` entry points."""

from __future__ import annotations

from mtc_provider.targets.gke.target import GkeTarget
from mtc_provider.targets.registry import lazy_kind
from mtc_provider.targets.gke.rules import RULES

KIND = lazy_kind("gke", GkeTarget, "mtc_provider.targets.gke.backend", "GkeBackend", RULES)
