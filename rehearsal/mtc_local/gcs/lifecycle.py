"""The local GCS as a background process per home, like `kind create cluster` leaves a cluster running.

`ensure_running(home)` returns the endpoint of the home's server, starting a detached one (a new session, so it
outlives the caller) when none answers; `stop(home)` ends it. Both hold an flock on `<home>/gcs/lock`, so two
callers at once start one server. The server writes `<home>/gcs/server.json` (pid, port, endpoint) once it listens.
The home is made private (0700) and given its token (`<home>/supervisor.token`, shared with the local cluster)
before the server starts; a server "answers" only when it proves it holds that token (`/_mtc/health?nonce=`).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from mtc_local.token import serves_home
from mtc_local.shared import auth

START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0


def gcs_dir(home: str | Path) -> Path:
    return Path(home) / "gcs"


def server_file(home: str | Path) -> Path:
    return gcs_dir(home) / "server.json"


def write_server_file(home: str | Path, endpoint: str, port: int) -> None:
    path = server_file(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{uuid.uuid4().hex}.tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "port": port, "endpoint": endpoint}))
    os.replace(tmp, path)


def remove_server_file(home: str | Path, pid: int) -> None:
    info = read_server_file(home)
    if info and info.get("pid") == pid:
        server_file(home).unlink(missing_ok=True)


def read_server_file(home: str | Path) -> dict[str, Any] | None:
    try:
        return json.loads(server_file(home).read_text())
    except (FileNotFoundError, ValueError):
        return None


@contextmanager
def _locked(home: str | Path) -> Iterator[None]:
    auth.make_private_dir(Path(home).resolve())
    gcs_dir(home).mkdir(mode=auth.PRIVATE_DIR, parents=True, exist_ok=True)
    with open(gcs_dir(home) / "lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _answers(endpoint: str, home: str | Path) -> bool:
    """The server at `endpoint` is up and holds this home's token (a stale file may name a port another program,
    or another user's, now has); the token is never sent to it before (mtc_local.token.serves_home)."""
    return serves_home(endpoint, Path(home).resolve())


def endpoint(home: str | Path) -> str | None:
    """The running server's endpoint for this home, or None (no start)."""
    info = read_server_file(home)
    if info and _alive(info.get("pid")) and _answers(info["endpoint"], home):
        return info["endpoint"]
    return None


def ensure_running(home: str | Path, idle_seconds: float = 0.0) -> str:
    """The endpoint (http://host:port) of this home's local GCS, started in the background if needed.

    `idle_seconds`: a server started here exits after that long without a request (0: runs until `stop`), so
    one started on demand by a task does not outlive its use; the next call starts another."""
    home = Path(home)
    with _locked(home):
        auth.ensure_token(home.resolve())
        found = endpoint(home)
        if found:
            return found
        server_file(home).unlink(missing_ok=True)
        log = open(gcs_dir(home) / "server.log", "ab")
        process = subprocess.Popen([sys.executable, "-m", "mtc_local.gcs.server", "--home", str(home),
                                    "--idle-seconds", str(idle_seconds)],
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=server_env(),
                                   start_new_session=True, close_fds=True)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            info = read_server_file(home)
            if info and info.get("pid") == process.pid:
                return info["endpoint"]
            if process.poll() is not None:
                break
            time.sleep(0.05)
        process.kill()
        tail = (gcs_dir(home) / "server.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"the local GCS for {home} did not start (exit {process.poll()}); its log ends:\n{tail}")


def stop(home: str | Path) -> bool:
    """Stop this home's local GCS; True when one was running. The bucket folders stay."""
    with _locked(home):
        info = read_server_file(home)
        pid = (info or {}).get("pid")
        if not info or not _alive(pid) or not _answers(info["endpoint"], home):
            server_file(home).unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        server_file(home).unlink(missing_ok=True)
        return True


KEPT_ENV = ("PATH", "PYTHONPATH", "VIRTUAL_ENV", "HOME", "LANG", "LC_ALL", "TMPDIR")


def server_env() -> dict[str, str]:
    """The server's environment: what Python needs and MTC_GCS_*; never the caller's connections or secrets."""
    return {k: v for k, v in os.environ.items() if k in KEPT_ENV or k.startswith("MTC_GCS_")}


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of this process is not a server
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True
