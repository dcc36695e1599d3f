"""Time spans around the provider's own calls inside Airflow's task processes (`resubmission_e2e --profile`).

`install(path)` wraps the calls the resumed `execute_complete` and the next try's `execute` make (client and hook
construction, every Kubernetes request by method, the run lock's round trips, the checkpoint listing, the pod-log
tails, the XCom pushes, the links) and appends one JSON line per call to `path`: name, start, end, depth, pid, the
DAG run id and try number of the try that made it. The generated benchmark DAG file calls it first thing, so the
task process's own start (its creation time) and the DAG file's import are recorded too. Benchmark code: nothing
here is imported by the provider.

`breakdown(records)` turns one try's records into (segment, seconds) rows: the provider's top-level calls (self
time), "other provider code" for the rest of `execute`/`execute_complete`, and Airflow's own parts around them.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import inspect
import json
import os
import sys
import threading
import time
from typing import Any, Callable, Iterable

_state = threading.local()
_lock = threading.Lock()
_current: dict[str, Any] = {"run_id": None, "try_number": None}
_path: str | None = None

# (module, class or None, attribute, span name or None for the attribute's name)
TARGETS: tuple[tuple[str, str | None, str, str | None], ...] = (
    ("mtc_provider.operators.jobset", "MtcJobSetOperator", "_specs", "specs: validate and trial render"),
    ("mtc_provider.operators.jobset", "MtcJobSetOperator", "_connection", "connection_for (target -> dict)"),
    ("mtc_provider.operators.jobset", "MtcJobSetOperator", "_store", "checkpoint store construction"),
    ("mtc_provider.operators.jobset", "MtcJobSetOperator", "_latest", "checkpoint listing (newest step)"),
    ("mtc_provider.hooks.jobset", "MtcJobSetHook", "this_tasks_jobsets", "list this task's JobSets"),
    ("mtc_provider.hooks.jobset", "MtcJobSetHook", "wait_for_deletion", "wait for terminating JobSet"),
    ("mtc_provider.operators.jobset", None, "submit", "submit (renumber + create)"),
    ("mtc_provider.adapters.run_lock", "RunLock", "close_attempt", "attempt record: close (lock update)"),
    ("mtc_provider.adapters.attempt_journal", "AttemptJournal", "report", "XCom push + attempts (lock read)"),
    ("mtc_provider.adapters.attempt_journal", "AttemptJournal", "relink_logs", "logs link (XCom)"),
    ("mtc_provider.operators.jobset", "MtcJobSetOperator", "_owner_gone", "owner gone? (Task SDK lookup)"),
    ("mtc_provider.operators.jobset_end", None, "log_failed_pod_tails", "pod-log tails of failed pods"),
    ("mtc_provider.operators.jobset", None, "persist_links", "links (XCom)"),
    ("mtc_provider.operators.jobset", None, "plan_launch", "plan_launch (pure)"),
    ("mtc_provider.targets.registry", None, "jobset_api", "JobSet api construction"),
    ("mtc_provider.adapters.run_lock", "RunLock", "acquire", "run lock: acquire"),
    ("mtc_provider.adapters.run_lock", "RunLock", "update", "run lock: update"),
    ("mtc_provider.adapters.run_lock", "RunLock", "read", "run lock: read"),
    ("mtc_provider.adapters.run_lock", "RunLock", "release", "run lock: release"),
    ("mtc_local.target.cluster", None, "running_kubeconfig", "client: kubeconfig check (socket)"),
    ("airflow.providers.cncf.kubernetes.hooks.kubernetes", "KubernetesHook", "get_conn",
     "client: KubernetesHook.get_conn"),
    ("mtc_provider.adapters.checkpoint_stores", None, "open_store", None),
    ("mtc_provider.adapters.pod_logs", "KubernetesPodLogs", "pods", "pod logs: list pods"),
    ("mtc_provider.adapters.pod_logs", "KubernetesPodLogs", "read", "pod logs: read a tail"),
    ("mtc_provider.triggers.attempt_end", None, "end_retryable_attempt", "trigger: end the try (TaskFailedEvent)"),
    ("mtc_provider.triggers.attempt_end", None, "_close_attempt", "trigger: attempt record (run lock update)"),
    ("mtc_provider.adapters.pod_logs", None, "log_failed_pod_tails", "pod-log tails of failed pods"),
    ("mtc_provider.adapters.kubernetes", "KubernetesJobSetApi", "_call", "k8s request:"),
)
TOPS = {"mtc_provider.operators.jobset": ("MtcJobSetOperator", ("execute", "execute_complete"))}
TOP = ("MtcJobSetOperator.execute", "MtcJobSetOperator.execute_complete")


def _record(row: dict[str, Any]) -> None:
    if _path is None:
        return
    line = json.dumps(row) + "\n"
    with _lock, open(_path, "a", encoding="utf-8") as out:
        out.write(line)


def _process_record() -> None:
    """Once per process: when it was created (a task process is forked by Airflow's supervisor)."""
    if _current.get("pid") == os.getpid():
        return
    _current["pid"] = os.getpid()
    try:
        import psutil

        created = psutil.Process().create_time()
    except Exception:  # noqa: BLE001
        return
    _record({"name": "process", "start": created, "end": created, "depth": -1, "pid": os.getpid(),
             "run_id": None, "try_number": None, "error": None})


def mark(name: str) -> None:
    """A point in time of this process (the DAG file's start and end in a task process)."""
    _process_record()
    now = time.time()
    _record({"name": name, "start": now, "end": now, "depth": -1, "pid": os.getpid(), "run_id": None,
             "try_number": None, "error": None})


def _wrap(fn: Callable[..., Any], name: str, *, top: bool = False, method_arg: bool = False) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def aspanned(*args: Any, **kwargs: Any) -> Any:
            ti = getattr(args[0], "task_instance", None) if args else None
            if ti is not None:
                _current.update(run_id=getattr(ti, "run_id", None), try_number=getattr(ti, "try_number", None))
            start, error = time.time(), None
            try:
                return await fn(*args, **kwargs)
            except BaseException as exc:
                error = type(exc).__name__
                raise
            finally:
                _record({"name": name, "start": start, "end": time.time(), "depth": 0, "pid": os.getpid(),
                         "run_id": _current["run_id"], "try_number": _current["try_number"], "error": error})

        aspanned.__mtc_span__ = True  # type: ignore[attr-defined]
        return aspanned

    @functools.wraps(fn)
    def spanned(*args: Any, **kwargs: Any) -> Any:
        if top:  # the try this process runs: every span below carries its ids
            _process_record()
            context = args[1] if len(args) > 1 else kwargs.get("context")
            ti = context["ti"] if context else None
            _current.update(run_id=getattr(ti, "run_id", None), try_number=getattr(ti, "try_number", None))
        label = f"{name} {args[1]}" if method_arg and len(args) > 1 else name
        depth = getattr(_state, "depth", 0)
        _state.depth = depth + 1
        start, error = time.time(), None
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            error = type(exc).__name__
            raise
        finally:
            _state.depth = depth
            _record({"name": label, "start": start, "end": time.time(), "depth": depth, "pid": os.getpid(),
                     "run_id": _current["run_id"], "try_number": _current["try_number"], "error": error})

    spanned.__mtc_span__ = True  # type: ignore[attr-defined]
    return spanned


def _patch(owner: Any, attribute: str, name: str, **kwargs: Any) -> None:
    raw = inspect.getattr_static(owner, attribute, None)
    fn = raw.__func__ if isinstance(raw, staticmethod) else raw
    if fn is None or getattr(fn, "__mtc_span__", False):
        return
    wrapped = _wrap(fn, name, **kwargs)
    setattr(owner, attribute, staticmethod(wrapped) if isinstance(raw, staticmethod) else wrapped)


def _patch_module(module: Any) -> None:
    for module_name, class_name, attribute, name in TARGETS:
        if module_name == module.__name__:
            owner = getattr(module, class_name, None) if class_name else module
            if owner is not None:
                _patch(owner, attribute, name or attribute, method_arg=attribute == "_call")
    class_name, methods = TOPS.get(module.__name__, (None, ()))
    for attribute in methods:
        _patch(getattr(module, class_name), attribute, f"{class_name}.{attribute}", top=True)


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then wraps the module's targets: imports stay where (and as slow as) they are."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        _patch_module(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _MODULES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


_MODULES = {t[0] for t in TARGETS} | set(TOPS)


def install(path: str) -> None:
    """Record spans to `path` from this process on (and in the processes it forks): each target module is wrapped
    when it is first imported, so nothing is imported early. Idempotent. Called from sitecustomize (--profile)."""
    global _path
    if _path is not None:
        return
    _path = path
    for name in _MODULES:  # already imported (unlikely at interpreter start): wrap now
        if name in sys.modules:
            _patch_module(sys.modules[name])
    sys.meta_path.insert(0, _Finder())


def read(path: str) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as source:
            return [json.loads(line) for line in source if line.strip()]
    except FileNotFoundError:
        return []


def try_records(records: Iterable[dict[str, Any]], run_id: str, try_number: int, top: str) -> list[dict[str, Any]]:
    """The records of the process that ran `top` for (run_id, try_number), with its process/import records."""
    records = list(records)
    top_rows = [r for r in records if r["name"] == top and r["run_id"] == run_id and r["try_number"] == try_number]
    if not top_rows:
        return []
    pid, first = top_rows[0]["pid"], top_rows[0]["start"]
    return [r for r in records if r["pid"] == pid and (r["run_id"] == run_id and r["try_number"] == try_number
                                                         or (r["run_id"] is None and r["start"] is not None
                                                             and r["start"] <= first))]


def breakdown(rows: list[dict[str, Any]], top: str, before: float | None, after: float | None) -> dict[str, float]:
    """Seconds per segment of one try's leg: `before` (the leg's start as observed) .. `after` (its end)."""
    out: dict[str, float] = {}
    main = next((r for r in rows if r["name"] == top), None)
    if main is None:
        return out
    process = [r for r in rows if r["name"] == "process"]
    dag_start = [r for r in rows if r["name"] == "dag file start"]
    dag_end = [r for r in rows if r["name"] == "dag file end"]
    if before is not None and process:
        out["Airflow: leg start (observed) -> task process forked"] = process[-1]["start"] - before
    if process and dag_start:
        out["Airflow: process forked -> DAG file starts"] = dag_start[-1]["start"] - process[-1]["start"]
    if dag_start and dag_end:
        out["DAG file: parse (imports the operator module)"] = dag_end[-1]["start"] - dag_start[-1]["start"]
        out["Airflow: DAG parsed -> operator method called"] = main["start"] - dag_end[-1]["start"]
    children = [r for r in rows if r["depth"] == main["depth"] + 1 and r["start"] >= main["start"]
                and r["end"] <= main["end"]]
    for child in children:
        key = "provider: " + child["name"]
        out[key] = out.get(key, 0.0) + (child["end"] - child["start"])
    out["provider: other code in " + top.split(".")[-1]] = (main["end"] - main["start"]) - sum(
        c["end"] - c["start"] for c in children)
    requests = [r for r in rows if r["name"].startswith("k8s request:")]
    clients = [r for r in rows if r["name"].startswith("client:")]
    out["  (of which Kubernetes requests)"] = sum(r["end"] - r["start"] for r in requests)
    out["  (Kubernetes requests, count)"] = len(requests)
    out["  (of which client construction)"] = sum(r["end"] - r["start"] for r in clients)
    first = min(requests, key=lambda r: r["start"]) if requests else None
    if first is not None and len(requests) > 1:  # the first request imports kubernetes and cncf.kubernetes
        rest = sorted(r["end"] - r["start"] for r in requests if r is not first)
        out["  (of which first request's extra: imports, s)"] = max(
            0.0, (first["end"] - first["start"]) - rest[len(rest) // 2])
    if after is not None:  # the observer polls the REST API every 0.5 s: its times lag by up to ~1 s under load
        out["Airflow: operator returned -> leg end observed"] = after - main["end"]
    return {k: round(v, 3) for k, v in out.items()}
