"""Read and write the workload's JSON-lines event files.

Pure Python (no JAX import): the local workload writes them, the goodput report and `mtc` read them.

Each line is one JSON object with at least ``ts`` (unix time, float), ``event`` (one of
:data:`EVENT_TYPES`), ``process`` (JAX process id) and ``step``. ``restore`` events carry ``tier``
(``local`` | ``persistent``) and ``duration_s``; ``save_start`` carries ``tier``;
``save_blocking`` carries ``tier`` and ``blocking_s`` (how long the save held training up: the goodput's
checkpoint_save badput); ``save_end`` carries ``tier`` and ``duration_s``; ``finish`` carries ``params_sha256``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any, Iterable

EVENT_TYPES = frozenset(
    {"start", "restore", "step", "save_start", "save_blocking", "save_end", "preempted", "finish", "error"}
)
TIERS = frozenset({"local", "persistent"})


def _json_default(obj: Any) -> Any:
    item = getattr(obj, "item", None)  # numpy / JAX scalars
    if callable(item):
        try:
            return item()
        except (TypeError, ValueError):
            pass
    return str(obj)


def append_event(path: str | os.PathLike, **fields: Any) -> dict:
    """Append one event as a single JSON line to ``path`` (created with parents) and flush it.

    ``ts`` defaults to ``time.time()``. ``event`` must be one of :data:`EVENT_TYPES`.
    Returns the written record.
    """
    event = fields.get("event")
    if event not in EVENT_TYPES:
        raise ValueError(f"event must be one of {sorted(EVENT_TYPES)}, got {event!r}")
    record = {"ts": time.time(), **fields}
    line = json.dumps(record, sort_keys=False, separators=(",", ":"), default=_json_default) + "\n"
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    # One write() of one line on an O_APPEND file: concurrent appenders do not interleave lines.
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)
    return record


def _iter_file(path: Path) -> Iterable[dict]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    yield from events_from_text(text)


def events_from_text(text: str) -> Iterable[dict]:
    """The events of one event file's text (a reader that opened the file itself: the run view)."""
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue  # torn (partially written) line, typically the last one of a killed process
        if isinstance(obj, dict) and "ts" in obj and "event" in obj:
            yield obj


def read_events(path_or_dir: str | os.PathLike) -> list[dict]:
    """Read events from one ``.jsonl`` file or from every ``*.jsonl`` file in a directory.

    Events of all files are merged and sorted by ``ts`` (stable: ties keep file order).
    Malformed or torn lines are skipped. A missing path gives an empty list.
    """
    p = Path(path_or_dir)
    if p.is_dir():
        files = sorted(p.glob("*.jsonl"))
    else:
        files = [p]
    events: list[dict] = []
    for f in files:
        events.extend(_iter_file(f))
    events.sort(key=lambda e: float(e.get("ts", 0.0)))
    return events


def events_path(base_output_directory: str, run_name: str, process_id: int) -> str:
    """Default event file of one process: ``<base>/<run_name>/events/process-<id>.jsonl``."""
    return os.path.join(base_output_directory, run_name, "events", f"process-{process_id}.jsonl")


def events_dir(base_output_directory: str, run_name: str) -> str:
    """Directory holding the default event files of a run."""
    return os.path.join(base_output_directory, run_name, "events")


async def alatest_event(checkpoint_dir: str | None, kind: str, since: float) -> dict | None:
    """The newest `kind` event at or after `since` in process 0's event file beside a local checkpoint directory
    (`<base>/<run>/events` beside `<base>/<run>/checkpoints`), read off the loop; None on a bucket, or when the file
    holds none or cannot be read."""
    if not checkpoint_dir or "://" in checkpoint_dir:
        return None
    path = os.path.join(os.path.dirname(checkpoint_dir.rstrip("/")), "events", "process-0.jsonl")
    try:
        event = await asyncio.to_thread(latest_event, path, kind)
    except OSError:
        return None
    return event if event is not None and float(event.get("ts") or 0) >= since else None


def latest_event(path: str | os.PathLike, kind: str = "step", tail_bytes: int = 65_536) -> dict | None:
    """The newest event of `kind` (``step``, ``restore``) with an integer step in one event file, reading only its
    last ``tail_bytes`` (a long run's file grows by one line a step); None when the file is missing or holds no such
    event there."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - tail_bytes))
            text = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    lines = text.splitlines()[1:] if size > tail_bytes else text.splitlines()  # the first may be cut
    for line in reversed(lines):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line
        if isinstance(obj, dict) and obj.get("event") == kind and isinstance(obj.get("step"), int):
            return obj
    return None
