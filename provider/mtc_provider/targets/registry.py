"""The one registry of targets: per kind, the target's data class, its backend and its JobSet connection.

A target kind is a `TargetKind` (one folder: `mtc_provider/targets/<kind>/`, or any distribution's package) found
through the `mtc_provider.targets` entry-point group: this distribution registers `gke` and `kubernetes`, the
rehearsal's (mtc-local, the `local` extra) registers `local`. A new target is one folder and one registry line:

    [project.entry-points."mtc_provider.targets"]
    mykind = "my_package.mytarget:KIND"

`registered(kind)` serves a kind programmatically inside a block, before any entry point (a test's target, or a
double: `registered_jobset_api`). Operators, sensors, triggers and links ask `backend_for(target)`,
`connection_for(target)` and `jobset_api(connection)`, and never branch on a target's class or kind. Kinds are
loaded when first asked for, so DAG files that only build targets stay light.
"""

from __future__ import annotations

import importlib

import contextlib
import dataclasses
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from mtc_provider.adapters.protocols import AsyncJobSetApi, CheckpointStore, JobSetApi, TargetBackend
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.basics.install import install_line
from mtc_provider.core.basics.kind_rules import KindRules

GROUP = "mtc_provider.targets"
DEFAULT_KIND = "local"  # the embedded default: no target, or a dict without a cluster, runs on the local target
# The kinds this project's distributions register, and the extra that installs each (for the error).
EXTRAS = {"local": "local"}
INSTALL = "{line} (after make dist)"


@dataclass(frozen=True)
class TargetKind:
    """What the provider needs of one target kind.

    :param kind: the name in `target.kind` and `connection["kind"]`.
    :param target_class: the target's data class (its fields, `to_dict()`, `template_fields`, `namespace`).
    :param backend: (target, api_endpoint) -> TargetBackend (adapters/protocols.py).
    :param jobset_api: (connection, request_timeout=..., outage_timeout=...) -> JobSetApi; the connection is what
        the backend's `jobset_connection()` returned (serializable, secret-free).
    :param async_jobset_api: (connection, poll_interval=..., request_timeout=...) -> AsyncJobSetApi (triggers).
    :param describe: connection -> how a 403 names it (ids and names only).
    :param store_for_path: local path -> the CheckpointStore for a folder this kind serves, or None (a trigger
        knows only the checkpoint folder).
    :param connection: target -> connection dict instead of `backend(...).jobset_connection()` (doubles).
    :param rules: the kind's rules for the run description, the plan and the watch (core.basics.kind_rules): core asks
        for them by kind and names no kind itself.
    """

    kind: str
    target_class: type
    backend: Callable[[Any, "str | None"], TargetBackend]
    jobset_api: Callable[..., JobSetApi]
    async_jobset_api: Callable[..., AsyncJobSetApi]
    describe: Callable[[Mapping[str, Any]], str] = lambda connection: f"connection kind {connection.get('kind')}"
    store_for_path: Callable[[Path], "CheckpointStore | None"] | None = None
    connection: Callable[[Any], dict[str, Any]] | None = None
    rules: KindRules = KindRules()


def lazy_kind(kind: str, target_class: type, backend_module: str, backend_class: str,
              rules: KindRules = KindRules()) -> TargetKind:
    """A TargetKind whose backend module is imported only when a run first needs it (DAG files stay light): the
    module has `backend_class(target, api_endpoint)`, `jobset_api`, `async_jobset_api` and `describe`."""

    def member(name: str) -> Any:
        return getattr(importlib.import_module(backend_module), name)

    return TargetKind(
        kind, target_class,
        backend=lambda target, api_endpoint: member(backend_class)(target, api_endpoint),
        jobset_api=lambda connection, **timeouts: member("jobset_api")(connection, **timeouts),
        async_jobset_api=lambda connection, **options: member("async_jobset_api")(connection, **options),
        describe=lambda connection: member("describe")(connection), rules=rules)


_registered: list[TargetKind] = []  # programmatic, innermost last
_points: dict[str, metadata.EntryPoint] | None = None  # the installed kinds, read once
_loaded: dict[str, TargetKind] = {}  # each loaded when first asked for


def _entry_points() -> dict[str, metadata.EntryPoint]:
    global _points
    if _points is None:
        points: dict[str, metadata.EntryPoint] = {}
        for point in metadata.entry_points(group=GROUP):
            seen = points.get(point.name)
            if seen is not None and seen.value != point.value:  # the same one twice is an editable install
                raise SpecError(f"entry point {GROUP}:{point.name}", point.value,
                                f"one registration per kind (also registered as {seen.value})")
            points[point.name] = point
        _points = points
    return _points


def _load(kind: str) -> TargetKind:
    if kind not in _loaded:
        point = _entry_points()[kind]
        entry = point.load()
        if not isinstance(entry, TargetKind) or entry.kind != kind:
            raise SpecError(f"entry point {GROUP}:{kind}", point.value, f"a TargetKind whose kind is {kind!r}")
        _loaded[kind] = entry
    return _loaded[kind]


def kinds() -> tuple[str, ...]:
    """Every kind one can choose: the registered ones, then the installed ones (none is imported here)."""
    return tuple(dict.fromkeys([*(k.kind for k in reversed(_registered)), *sorted(_entry_points())]))


def kind_of(kind: Any) -> TargetKind:
    """The kind's registration: a programmatic one first (the innermost `registered` block), else the entry point.
    An unknown kind is an error naming the kinds there are, and the extra that would install it."""
    if not isinstance(kind, str):
        raise SpecError("target.kind", kind, "a kind's name: " + (" or ".join(kinds()) or "none installed"))
    for entry in reversed(_registered):
        if entry.kind == kind:
            return entry
    if kind in _entry_points():
        return _load(kind)
    allowed = " or ".join(kinds()) or "no kind (none installed)"
    if kind in EXTRAS:
        allowed += (f"; the {kind} target is in the {EXTRAS[kind]!r} extra, which is not installed: "
                    + INSTALL.format(line=install_line(EXTRAS[kind])))
    raise SpecError("target.kind", kind, allowed)


@contextlib.contextmanager
def registered(entry: TargetKind) -> Iterator[TargetKind]:
    """Serve `entry.kind` with `entry` inside the block (a new kind, or another implementation of one)."""
    _registered.append(entry)
    try:
        yield entry
    finally:
        _registered.remove(entry)


def registered_jobset_api(kind: str, sync_factory: Callable[[Mapping[str, Any]], JobSetApi],
                          async_factory: Callable[[Mapping[str, Any]], AsyncJobSetApi]) -> contextlib.AbstractContextManager:
    """Serve `kind`'s JobSets with these factories inside the block (each gets the connection dict), its backend
    otherwise unchanged; the connection is the target's own dict (a double needs no endpoint). Tests use the
    in-memory JobSet API this way: no monkeypatching."""
    return registered(dataclasses.replace(
        kind_of(kind), jobset_api=lambda connection, **_: sync_factory(connection),
        async_jobset_api=lambda connection, **_: async_factory(connection), connection=lambda target: target.to_dict()))


# ---- what the Airflow glue asks ----------------------------------------------------------------------------------
def backend_for(target: Any, api_endpoint: str | None = None) -> TargetBackend:
    """The target's backend. `api_endpoint` overrides the managed control plane's endpoint (GKE's Container API)."""
    target = target_from_dict(target)
    return kind_of(target.kind).backend(target, api_endpoint)


def connection_for(target: Any, kubernetes_conn_id: str | None = None) -> dict[str, Any]:
    """Serializable connection details for a target (for GKE this reads the cluster, endpoint and CA, once).
    `kubernetes_conn_id` names an Airflow Kubernetes connection instead (the cncf.kubernetes operators' way)."""
    if kubernetes_conn_id:
        return {"kind": "kubernetes", "kubernetes_conn_id": kubernetes_conn_id}
    target = target_from_dict(target)
    entry = kind_of(target.kind)
    if entry.connection is not None:
        return entry.connection(target)
    return entry.backend(target, None).jobset_connection()


def _entry(connection: Mapping[str, Any]) -> TargetKind:
    try:
        return kind_of(connection.get("kind"))
    except SpecError as err:
        raise SpecError("connection.kind", connection.get("kind"), err.allowed) from None


def describe_connection(connection: Mapping[str, Any]) -> str:
    """How a 403 names the connection, beside the identity the API server names (no secrets: ids and names only)."""
    try:
        return _entry(connection).describe(connection)
    except SpecError:
        return f"connection kind {connection.get('kind')}"


def jobset_api(connection: Mapping[str, Any], *, request_timeout: float | None = None,
               outage_timeout: float = 0.0) -> JobSetApi:
    """The sync api (operators, the delete operator, the sensor's first look).

    :param request_timeout: client-side seconds per request (default adapters.kubernetes.REQUEST_TIMEOUT).
    :param outage_timeout: seconds an unreachable API is waited out before ApiUnreachable (0: bounded retries only).
    """
    return _entry(connection).jobset_api(connection, request_timeout=request_timeout, outage_timeout=outage_timeout)


def async_jobset_api(connection: Mapping[str, Any], poll_interval: float = 30.0, *,
                     request_timeout: float | None = None) -> AsyncJobSetApi:
    """The async api for triggers, rebuilt from the connection dict inside the triggerer.

    :param request_timeout: client-side seconds per request (default adapters.kubernetes.REQUEST_TIMEOUT).
    """
    return _entry(connection).async_jobset_api(connection, poll_interval=poll_interval,
                                               request_timeout=request_timeout)


def store_for_path(path: Path) -> CheckpointStore | None:
    """The store of the installed kind that serves this local folder (the local target's bucket folders), if any."""
    for name in kinds():
        entry = kind_of(name)
        store = entry.store_for_path(path) if entry.store_for_path else None
        if store is not None:
            return store
    return None


def _default_kind(field: str) -> TargetKind:
    """The kind a run that names none goes to (DEFAULT_KIND). Where it is not installed, the error names what the
    user left out (`field`, none given) and the kinds there are, not a kind the user never chose."""
    if DEFAULT_KIND in kinds():
        return kind_of(DEFAULT_KIND)
    raise SpecError(field, None, f"a target of an installed kind: {' or '.join(kinds()) or 'none installed'} "
                                 f"(without one a run goes to the {DEFAULT_KIND} target, in the "
                                 f"{EXTRAS[DEFAULT_KIND]!r} extra, which is not installed: "
                                 f"{INSTALL.format(line=install_line(EXTRAS[DEFAULT_KIND]))})")


def target_from_dict(data: Any) -> Any:
    """Accept a target object, a dict (from DAG params or a trigger's kwargs), or None (the local target)."""
    if data is None:
        return _default_kind("target").target_class()
    if not isinstance(data, dict) and hasattr(data, "kind"):  # already a target
        return data
    values = dict(data)
    kind = values.pop("kind", "gke" if "cluster_name" in values else None)
    entry = _default_kind("target.kind") if kind is None else kind_of(kind)
    kind, cls = entry.kind, entry.target_class
    fields = [f for f in cls.__dataclass_fields__ if f not in ("kind", "template_fields")]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise SpecError(f"target.{unknown[0]}", values[unknown[0]],
                        f"one of the {kind} target's fields: " + ", ".join(fields))
    return cls(**values)
