"""The kubernetes target's room: any cluster with JobSet installed (target.py) and its backend
(backend.py: the cluster through the cncf.kubernetes provider's KubernetesHook, GCS through the Google
connection; no managed control plane). Registered as `kubernetes` in the `mtc_provider.targets` entry points."""

from __future__ import annotations

from mtc_provider.targets.kubernetes.target import KubernetesTarget
from mtc_provider.targets.registry import lazy_kind
from mtc_provider.targets.kubernetes.rules import RULES

KIND = lazy_kind("kubernetes", KubernetesTarget, "mtc_provider.targets.kubernetes.backend", "KubernetesBackend", RULES)
