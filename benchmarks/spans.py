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
import inspect
import json
import os
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
    ("mtc_provider.operators.jobset", "MtcJobSetOperator", "_this_tasks_jobsets", "list this task's JobSets"),
    ("mtc_provider.operators.jobset", "MtcJobSetOperator", "_wait_for_deletion", "wait for terminating JobSet"),
    ("mtc_provider.operators.jobset", "MtcJobSetOperator", "_submit", "submit (render + create)"),
    ("mtc_provider.operators.jobset", "MtcJobSetOperator", "_close", "attempt record: close (lock update)"),
    ("mtc_provider.operators.jobset", "MtcJobSetOperator", "_push", "XCom push + attempts (lock read)"),
    ("mtc_provider.operators.jobset", "MtcJobSetOperator", "_relink_logs", "logs link (XCom)"),
    ("mtc_provider.operators.jobset", "MtcJobSetOperator", "_owner_gone", "owner gone? (Task SDK lookup)"),
    ("mtc_provider.operators.jobset", None, "log_failed_pod_tails", "pod-log tails of failed pods"),
    ("mtc_provider.operators.jobset", None, "persist_links", "links (XCom)"),
    ("mtc_provider.operators.jobset", None, "plan_launch", "plan_launch (pure)"),
    ("mtc_provider.adapters.jobset_factory", None, "jobset_api", "JobSet api construction"),
    ("mtc_provider.adapters.run_lock", "RunLock", "acquire", "run lock: acquire"),
    ("mtc_provider.adapters.run_lock", "RunLock", "update", "run lock: update"),
    ("mtc_provider.adapters.run_lock", "RunLock", "read", "run lock: read"),
    ("mtc_provider.adapters.run_lock", "RunLock", "release", "run lock: release"),
    ("mtc_provider.adapters.local_cluster", None, "running_kubeconfig", "client: kubeconfig check (socket)"),
    ("airflow.providers.cncf.kubernetes.hooks.kubernetes", "KubernetesHook", "get_conn", "client: KubernetesHook.get_conn"),
    ("mtc_provider.adapters.checkpoint_stores", None, "open_store", None),
    ("mtc_provider.adapters.pod_logs", "KubernetesPodLogs", "pods", "pod logs: list pods"),
    ("mtc_provider.adapters.pod_logs", "KubernetesPodLogs", "read", "pod logs: read a tail"),
)
TOP = ("MtcJobSetOperator.execute", "MtcJobSetOperator.execute_complete")


def _record(row: dict[str, Any]) -> None:
    if _path is None:
        return
    line = json.dumps(row) + "\n"
    with _lock, open(_path, "a", encoding="utf-8") as out:
        out.write(line)


def _wrap(fn: Callable[..., Any], name: str, *, top: bool = False, method_arg: bool = False) -> Callable[..., Any]:
    @functools.wraps(fn)
    def spanned(*args: Any, **kwargs: Any) -> Any:
        if top:  # the try this process runs: every span below carries its ids
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


def install(path: str) -> None:
    """Record spans to `path` in this process (idempotent); also the process's start and this call's time."""
    global _path
    if _path is not None:
        return
    _path = path
    try:
        import psutil

        created = psutil.Process().create_time()
    except Exception:  # noqa: BLE001
        created = None
    _record({"name": "process", "start": created, "end": time.time(), "depth": -1, "pid": os.getpid(),
             "run_id": None, "try_number": None, "error": None})
    started = time.time()
    for module_name, class_name, attribute, name in TARGETS:
        module = importlib.import_module(module_name)
        owner = getattr(module, class_name) if class_name else module
        _patch(owner, attribute, name or attribute)
    operator = importlib.import_module("mtc_provider.operators.jobset").MtcJobSetOperator
    for attribute in ("execute", "execute_complete"):
        _patch(operator, attribute, f"MtcJobSetOperator.{attribute}", top=True)
    kubernetes = importlib.import_module("mtc_provider.adapters.kubernetes").KubernetesJobSetApi
    _patch(kubernetes, "_call", "k8s request:", method_arg=True)
    _record({"name": "imports (provider, cncf.kubernetes)", "start": started, "end": time.time(), "depth": -1,
             "pid": os.getpid(), "run_id": None, "try_number": None, "error": None})


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
    process = [r for r in rows if r["name"] == "process" and r["start"] is not None]
    imports = [r for r in rows if r["name"].startswith("imports")]
    if before is not None and process:
        out["Airflow: leg start -> task process forked"] = process[-1]["start"] - before
    if process:
        out["Airflow: process forked -> DAG file runs"] = process[-1]["end"] - process[-1]["start"]
    if imports:
        out["DAG file: provider + cncf.kubernetes imports"] = imports[-1]["end"] - imports[-1]["start"]
        out["Airflow: DAG parsed -> operator method called"] = main["start"] - imports[-1]["end"]
    children = [r for r in rows if r["depth"] == main["depth"] + 1 and r["start"] >= main["start"]
                and r["end"] <= main["end"]]
    for child in children:
        key = "provider: " + child["name"]
        out[key] = out.get(key, 0.0) + (child["end"] - child["start"])
    out["provider: other code in " + top.split(".")[-1]] = (main["end"] - main["start"]) - sum(
        c["end"] - c["start"] for c in children)
    requests = [r for r in rows if r["name"].startswith("k8s request:")]
    clients = [r for r in rows if r["name"].startswith("client:")]
    out["  (of which Kubernetes requests: n=%d)" % len(requests)] = sum(r["end"] - r["start"] for r in requests)
    out["  (of which client construction: n=%d)" % len(clients)] = sum(r["end"] - r["start"] for r in clients)
    if after is not None:
        out["Airflow: operator returned -> leg end observed"] = after - main["end"]
    return {k: round(v, 3) for k, v in out.items()}
