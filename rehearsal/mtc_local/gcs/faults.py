"""Listing outages on the local GCS, driven by a control file (`<home>/gcs/faults.json`), so a test, a fault
plan or a person can make `objects.list` fail for a while with real processes running:

    {"listings": {"status": 503, "until": <unix s>, "prefix": "run/checkpoints/", "hang_s": 2.0}}

`status` is 403, 429 or 503 (answered with GCS's error body: https://cloud.google.com/storage/docs/json_api/v1/status-codes)
or "timeout" (the request hangs `hang_s` seconds, then is answered normally). `prefix` narrows the outage to
listings whose prefix starts with it. Only listings fail: uploads, downloads and bucket calls keep working,
as in the outage this reproduces (a revoked storage.objects.list, a rate limit, a backend error).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from mtc_provider.core.basics.errors import SpecError

STATUSES = (403, 429, 503, "timeout")


def control_file(home: str | Path) -> Path:
    return Path(home) / "gcs" / "faults.json"


def fail_listings(home: str | Path, status: int | str, seconds: float, prefix: str = "", hang_s: float = 2.0) -> None:
    """From now on, for `seconds`, listings under `prefix` answer `status` (403/429/503) or hang ("timeout")."""
    if status not in STATUSES:
        raise SpecError("status", status, "403, 429, 503 or 'timeout'")
    if not isinstance(seconds, (int, float)) or seconds <= 0:
        raise SpecError("seconds", seconds, "a positive number of seconds")
    _write(home, {"listings": {"status": status, "until": time.time() + seconds, "prefix": prefix, "hang_s": hang_s}})


def clear(home: str | Path) -> None:
    control_file(home).unlink(missing_ok=True)


def _write(home: str | Path, data: dict[str, Any]) -> None:
    path = control_file(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{uuid.uuid4().hex}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


class ListingFaults:
    """The server's side: the active listing outage for a prefix, re-read only when the file changes."""

    def __init__(self, home: str | Path) -> None:
        self.path = control_file(home)
        self._stamp: tuple[int, int] | None = None
        self._rule: dict[str, Any] = {}

    def _current(self) -> dict[str, Any]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._stamp, self._rule = None, {}
            return {}
        if (stat.st_mtime_ns, stat.st_ino) != self._stamp:
            try:
                self._rule = json.loads(self.path.read_text()).get("listings") or {}
            except (ValueError, OSError):
                self._rule = {}
            self._stamp = (stat.st_mtime_ns, stat.st_ino)
        return self._rule

    def active(self, prefix: str) -> dict[str, Any] | None:
        rule = self._current()
        if rule and time.time() < float(rule.get("until", 0)) and prefix.startswith(rule.get("prefix") or ""):
            return rule
        return None
