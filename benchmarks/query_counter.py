"""Count the SQL statements an Airflow process sends to its metadata database, for benchmarks only.

Installed from `$AIRFLOW_HOME/config/airflow_local_settings.py` (Airflow imports that module in every component
at start-up: <https://airflow.apache.org/docs/apache-airflow/stable/howto/set-config.html#configuring-local-settings>),
it listens to SQLAlchemy's `before_cursor_execute` on every Engine
(<https://docs.sqlalchemy.org/en/20/core/events.html#sqlalchemy.events.ConnectionEvents.before_cursor_execute>)
and keeps one file per process in `directory` with its cumulative count, rewritten at most every
FLUSH_INTERVAL_S and at exit. The same count for PostgreSQL and SQLite: the two arms of a benchmark compare alike.
A forked child (Celery's pool, the LocalExecutor's workers) starts its own count and file.
"""

from __future__ import annotations

import atexit
import os
import time
import uuid
from pathlib import Path

FLUSH_INTERVAL_S = 0.5
LOCAL_SETTINGS = '''"""Written by benchmarks: count metadata-database statements (benchmarks/query_counter.py)."""
from benchmarks.query_counter import install

install({directory!r})
'''


class _Counter:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._reset()

    def _reset(self) -> None:
        self.pid = os.getpid()
        self.count = 0
        self.flushed_at = 0.0
        self.path = self.directory / f"{self.pid}-{uuid.uuid4().hex[:8]}.count"

    def hit(self, *_: object) -> None:
        if os.getpid() != self.pid:  # a forked child that never ran the at-fork hook (e.g. multiprocessing)
            self._reset()
        self.count += 1
        now = time.monotonic()
        if now - self.flushed_at >= FLUSH_INTERVAL_S:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        if not self.count:
            return
        self.flushed_at = time.monotonic() if now is None else now
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(str(self.count))
        os.replace(tmp, self.path)


def install(directory: str) -> None:
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    Path(directory).mkdir(parents=True, exist_ok=True)
    counter = _Counter(Path(directory))
    event.listen(Engine, "before_cursor_execute", counter.hit)
    os.register_at_fork(after_in_child=counter._reset)
    atexit.register(counter.flush)


def total(directory: str | Path) -> int:
    """Statements counted so far by every process that used `directory`."""
    found = 0
    for path in Path(directory).glob("*.count"):
        try:
            found += int(path.read_text() or 0)
        except (OSError, ValueError):  # replaced between listing and reading
            continue
    return found
