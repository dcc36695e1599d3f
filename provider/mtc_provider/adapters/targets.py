"""The one registry that picks, per target kind, the small Protocols the Airflow glue talks to.

A target (GkeTarget, LocalTarget, KubernetesTarget) is data; its backend says how to reach it: the cluster (readiness, a
Kubernetes client for cluster-scoped objects, which control-plane steps apply), the JobSet connection,
the bucket, the checkpoint store and the Console scope of its links (adapters/protocols.py). Operators,
sensors, triggers and links ask `backend_for(target)` and never branch on the target's class. Backends
are imported when first asked for, so DAG files that only build targets stay light.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, Callable, Iterator, Mapping

from mtc_provider.adapters.protocols import CheckpointStore, TargetBackend
from mtc_provider.core.errors import SpecError
from mtc_provider.target import Target, target_from_dict

BackendFactory = Callable[[Any, "str | None"], TargetBackend]
# kind -> "module:class"; each class takes (target, api_endpoint)
_BUILTIN = {"gke": "mtc_provider.adapters.gke_target:GkeBackend",
            "local": "mtc_local.target.backend:LocalBackend",
            "kubernetes": "mtc_provider.adapters.kubernetes_target:KubernetesBackend"}
_registry: dict[str, BackendFactory] = {}


def _builtin(kind: str) -> BackendFactory:
    module, name = _BUILTIN[kind].split(":")
    return getattr(importlib.import_module(module), name)


def kinds() -> tuple[str, ...]:
    return tuple(dict.fromkeys([*_BUILTIN, *_registry]))


def backend_for(target: Target | Mapping[str, Any] | None, api_endpoint: str | None = None) -> TargetBackend:
    """The target's backend. `api_endpoint` overrides the managed control plane's endpoint (GKE's Container API)."""
    target = target_from_dict(target)
    kind = target.kind
    if kind in _registry:
        return _registry[kind](target, api_endpoint)
    if kind in _BUILTIN:
        return _builtin(kind)(target, api_endpoint)
    raise SpecError("target.kind", kind, " or ".join(kinds()))


@contextlib.contextmanager
def registered(kind: str, factory: BackendFactory) -> Iterator[None]:
    """Serve `kind` with `factory` inside the block (another cluster flavour, or a test's backend)."""
    previous = _registry.get(kind)
    _registry[kind] = factory
    try:
        yield
    finally:
        if previous is None:
            _registry.pop(kind, None)
        else:
            _registry[kind] = previous


class ListsCheckpointsByPath:
    """The checkpoint store every backend uses: chosen by the folder (gs://, a local bucket, a directory), read with
    the backend's own Google connection."""

    def google(self) -> tuple[str, Any]:  # pragma: no cover - each backend defines it
        raise NotImplementedError

    def checkpoint_store(self, checkpoint_dir: str) -> CheckpointStore:
        from mtc_provider.adapters.checkpoint_stores import open_store

        return open_store(checkpoint_dir, *self.google())
