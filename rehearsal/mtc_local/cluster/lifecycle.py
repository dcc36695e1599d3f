"""Start, find and stop a home's local cluster (the runner's supervisor and its API server), as `kind` would.

`ensure_running(home)` answers the kubeconfig path once the API server answers an authenticated request over TLS
checked against the home's own CA (so a stale port now used by another program is never mistaken for it), starting
the supervisor in a new session when none answers. `stop(home)` ends it by the PID it recorded, after checking that
PID is still that supervisor.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from mtc_local.cluster import kubeconfig
from mtc_local.shared import auth
from mtc_local.shared.state import Home, read_json

START_TIMEOUT = 30.0
SUPERVISOR_MODULE = "mtc_local.supervisor"
STAY_FILE = "stay"  # present: the supervisor does not exit when idle (`mtc local up` until `mtc local down`)


class ClusterUnavailable(RuntimeError):
    """The local cluster did not come up (its log is <home>/supervisor.log)."""


def spawn(home: Home) -> subprocess.Popen[bytes]:
    """Start the supervisor detached (a new session: it outlives the task or shell that started it)."""
    auth.make_private_dir(home.root)
    log_fd = os.open(home.supervisor_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, auth.PRIVATE_FILE)
    with os.fdopen(log_fd, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", SUPERVISOR_MODULE, str(home.root)], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)


def answers(home: Home, timeout: float = 5.0) -> bool:
    """True when the API server in this home's kubeconfig answers this home's token over this home's CA."""
    info = read_json(home.supervisor_file)
    ca = home.root / "pki" / "ca.crt"
    try:
        token = auth.read_token(home.root)
    except auth.TokenError:
        return False
    if not info or not info.get("api_port") or token is None or not ca.exists():
        return False
    host = info.get("host") or "127.0.0.1"
    request = urllib.request.Request(f"https://{host}:{info['api_port']}/version",
                                     headers={"Authorization": f"Bearer {token.decode()}"})
    try:
        context = ssl.create_default_context(cafile=str(ca))
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status == 200 and "gitVersion" in json.loads(response.read())
    except (OSError, ValueError, ssl.SSLError, urllib.error.URLError):
        return False


def ensure_running(home: str | os.PathLike[str], stay: bool = False, timeout: float = START_TIMEOUT) -> Path:
    """The kubeconfig of the home's running cluster, started on demand."""
    where = Home.of(home)
    auth.make_private_dir(where.root)
    if stay:
        (where.root / STAY_FILE).touch(mode=auth.PRIVATE_FILE)
    deadline = time.monotonic() + timeout
    spawned: subprocess.Popen[bytes] | None = None
    while not answers(where):
        if time.monotonic() > deadline:
            raise ClusterUnavailable(f"the local cluster of {where.root} did not answer within {timeout:.0f}s; "
                                     f"see {where.supervisor_log}")
        if spawned is None or spawned.poll() is not None:
            spawned = spawn(where)
        time.sleep(0.05)
    return kubeconfig.path(where.root)


def supervisor_pid(home: Home) -> int | None:
    """The recorded supervisor PID, when that process is still this home's supervisor."""
    info = read_json(home.supervisor_file)
    if not info or not info.get("pid"):
        return None
    try:
        cmdline = psutil.Process(int(info["pid"])).cmdline()
    except psutil.Error:
        return None
    return int(info["pid"]) if SUPERVISOR_MODULE in cmdline and str(home.root) in cmdline else None


def stop(home: str | os.PathLike[str], timeout: float = 60.0) -> bool:
    """SIGTERM the home's supervisor (it kills its pods and exits); True when one was running."""
    where = Home.of(home)
    (where.root / STAY_FILE).unlink(missing_ok=True)
    pid = supervisor_pid(where)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    try:
        psutil.Process(pid).wait(timeout)
    except psutil.NoSuchProcess:
        pass
    return True
