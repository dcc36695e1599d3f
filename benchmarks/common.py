"""Shared helpers for the benchmarks: repeats and medians, ratio tables, JSON results, and a local runner home.

Every benchmark measures our path and a baseline in the same run and reports ratios: absolute times drift on a
shared machine, ratios of interleaved runs much less.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results"
NAMESPACE = "default"


# ---- numbers ----------------------------------------------------------------------------------------
def median(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def ratio(ours: float | None, baseline: float | None) -> float | None:
    """ours / baseline, or None when either is missing or the baseline is zero."""
    if ours is None or baseline is None or baseline == 0:
        return None
    return ours / baseline


def interleaved(arms: Mapping[str, Callable[[], Any]], repeats: int) -> dict[str, list[Any]]:
    """Run every arm `repeats` times, alternating the order each round so drift hits both arms alike."""
    names = list(arms)
    out: dict[str, list[Any]] = {name: [] for name in names}
    for round_index in range(repeats):
        order = names if round_index % 2 == 0 else names[::-1]
        for name in order:
            out[name].append(arms[name]())
    return out


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


# ---- reporting ----------------------------------------------------------------------------------------
def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right" if column != columns[0] else "left")
    for row in rows:
        table.add_row(*(fmt(cell) for cell in row))
    Console(width=160).print(table)  # wide enough when stdout is not a terminal


def command_line() -> str:
    """How this benchmark was started, to paste into docs/benchmarks.md."""
    return " ".join(shlex.quote(part) for part in ["python", "-m", _module_name(), *sys.argv[1:]])


def _module_name() -> str:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return spec.name
    return Path(sys.argv[0]).stem


def result_path(name: str, quick: bool, output: str | None) -> Path:
    if output:
        return Path(output)
    return RESULTS_DIR / (f"{name}.quick.json" if quick else f"{name}.json")


def write_result(path: Path, name: str, data: Mapping[str, Any]) -> Path:
    """Write the result with the date, the exact command and the machine it ran on."""
    record = {
        "benchmark": name,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
        "machine": {
            "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        **data,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
    return path


def argument_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a short run (smoke test), not a result to publish")
    parser.add_argument("--output", help="where to write the JSON result (default benchmarks/results/<name>.json)")
    parser.add_argument("--seed", type=int, default=0, help="training seed (same for every arm)")
    return parser


# ---- the local target ---------------------------------------------------------------------------------
def local_jobset(
    name: str,
    checkpointing: Any,
    extra_flags: Mapping[str, Any] | None = None,
    fault_plan: list[dict[str, Any]] | None = None,
    max_restarts: int = 10,
    grace_seconds: int = 60,
    num_slices: int = 2,
) -> dict[str, Any]:
    """The JobSet the GKE path would render (v6e 2x2, one host per slice), running the local workload."""
    from mtc_provider.core.definition.render.jobset_manifest import build_jobset
    from mtc_provider.core.definition.description.spec import WorkloadSpec
    from mtc_provider.core.definition.shape.tpu import SliceSpec
    from mtc_local.runner.manifest import FAULT_PLAN_ANNOTATION

    slices = SliceSpec("v6e", "2x2", num_slices, "ct6e-standard-4t")
    workload = WorkloadSpec(
        jobset_name=name,
        image="local",
        command=("python3", "-m", "mtc_local.workload"),
        extra_flags=dict(extra_flags or {}),
        namespace=NAMESPACE,
        max_restarts=max_restarts,
        termination_grace_period_seconds=grace_seconds,
    )
    body = build_jobset(slices, checkpointing, workload)
    if fault_plan:
        body["metadata"]["annotations"][FAULT_PLAN_ANNOTATION] = json.dumps(fault_plan)
    return body


def wait_terminal(api: Any, name: str, timeout: float) -> dict[str, Any]:
    """Poll the JobSet until it has a terminalState; TimeoutError (with the JobSet) after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        obj = api.get(NAMESPACE, name)
        if obj.get("status", {}).get("terminalState"):
            return obj
        if time.monotonic() > deadline:
            raise TimeoutError(f"JobSet {name} not terminal after {timeout:.0f}s: {obj.get('status')}")
        time.sleep(0.2)


@contextlib.contextmanager
def local_runner(prefix: str) -> Iterator[tuple[Any, Path]]:
    """A fresh runner home and scratch directory; afterwards every JobSet is deleted, the supervisor stopped
    (by its pid), the tmpfs tree removed and the scratch directory deleted."""
    from mtc_local.cluster.client import LocalCluster
    from mtc_local.shared.state import Home, read_json

    scratch = Path(tempfile.mkdtemp(prefix=f"mtc-bench-{prefix}-"))
    home = Home.of(scratch / "home")
    api = LocalCluster(str(home.root))
    try:
        yield api, scratch
    finally:
        for obj in api.list(NAMESPACE):
            with contextlib.suppress(Exception):
                api.delete(NAMESPACE, obj["metadata"]["name"], timeout=90)
        info = read_json(home.supervisor_file)
        if info:
            _stop(int(info["pid"]))
        shutil.rmtree(home.shm_root, ignore_errors=True)
        if not os.environ.get("MTC_BENCH_KEEP"):
            shutil.rmtree(scratch, ignore_errors=True)


def _stop(pid: int) -> None:
    """SIGTERM the supervisor (it then SIGKILLs any pod left) and reap it; SIGKILL if it does not exit."""
    import psutil

    try:
        proc = psutil.Process(pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        proc.kill()
