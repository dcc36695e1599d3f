"""An outage switch for the local API server: rehearse a control-plane outage (a zonal GKE control plane upgrade,
a load balancer in trouble) against real clients.

Modes, each until cleared or for `seconds`:
- `unavailable`: every request is answered `503 ServiceUnavailable` with a `Retry-After: <retry_after>` header,
  as the Kubernetes API answers while it cannot serve (https://kubernetes.io/docs/concepts/cluster-administration/
  flow-control/; Retry-After: RFC 9110 section 10.2.3);
- `drop`: every connection is reset without an answer (to a client, no HTTP answer at all, as when connections
  are refused);
- `hang`: requests are read and never answered while the fault lasts (a half-open connection), then dropped.
Setting any mode also cuts the watches that are open (their streams end without the closing chunk), as an outage
does; `cut_watches()` alone does only that.

In process: `ApiServer.faults.set("unavailable", seconds=36, retry_after=5)`. From another process (the server
is hosted by the runner's supervisor): `POST /mtc/faults` with the cluster's bearer token and a JSON body
{"mode": "unavailable" | "drop" | "hang" | "none", "seconds": 36, "retry_after": 5} or {"cut_watches": true};
`GET /mtc/faults` reads the switch. That path is never faulted.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

MODES = ("none", "unavailable", "drop", "hang")
CONTROL_PATH = "/mtc/faults"


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Condition()
        self.mode = "none"
        self.retry_after = 1
        self.until: float | None = None  # monotonic end of the fault; None: until cleared
        self._watches: set[socket.socket] = set()
        self.faulted = 0  # requests the switch answered (or dropped) instead of the server
        self.faulted_at: list[float] = []  # their monotonic times (the last 1000): how fast clients come back
        self.faulted_paths: list[str] = []  # and their paths, so each caller's own pace can be read apart

    def set(self, mode: str, seconds: float | None = None, retry_after: int = 1) -> dict[str, Any]:
        """Switch to `mode` for `seconds` (None: until `set("none")`); errors name the bad value."""
        if mode not in MODES:
            raise ValueError(f"mode: {mode!r} is not allowed; allowed: {', '.join(MODES)}")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0):
            raise ValueError(f"seconds: {seconds!r} is not allowed; allowed: a positive number, or null")
        if isinstance(retry_after, bool) or not isinstance(retry_after, int) or retry_after < 0:
            raise ValueError(f"retry_after: {retry_after!r} is not allowed; allowed: an integer >= 0")
        with self._lock:
            self.mode, self.retry_after = mode, retry_after
            self.until = None if seconds is None or mode == "none" else time.monotonic() + seconds
            self._lock.notify_all()
        if mode != "none":
            self.cut_watches()
        return self.state()

    def count(self, path: str = "") -> None:
        """One request answered by the switch."""
        with self._lock:
            self.faulted += 1
            self.faulted_at = [*self.faulted_at[-999:], time.monotonic()]
            self.faulted_paths = [*self.faulted_paths[-999:], path]

    def current(self) -> str:
        with self._lock:
            if self.until is not None and time.monotonic() >= self.until:
                self.mode, self.until = "none", None
            return self.mode

    def state(self) -> dict[str, Any]:
        mode = self.current()
        left = None if self.until is None else max(0.0, self.until - time.monotonic())
        return {"mode": mode, "seconds_left": left, "retry_after": self.retry_after, "faulted": self.faulted,
                "open_watches": len(self._watches)}

    def wait_while_hanging(self, stopping: threading.Event) -> None:
        """Block the request's thread while the `hang` fault lasts (or the server stops)."""
        while self.current() == "hang" and not stopping.is_set():
            with self._lock:
                left = None if self.until is None else self.until - time.monotonic()
                self._lock.wait(timeout=0.2 if left is None else max(0.0, min(left, 0.2)))

    # --- watches ---
    def watch_opened(self, sock: socket.socket) -> None:
        with self._lock:
            self._watches.add(sock)

    def watch_closed(self, sock: socket.socket) -> None:
        with self._lock:
            self._watches.discard(sock)

    def cut_watches(self) -> int:
        """End every open watch stream at once, without its closing chunk; how many were cut."""
        with self._lock:
            watches, self._watches = list(self._watches), set()
        for sock in watches:
            reset(sock)
        return len(watches)


def reset(sock: socket.socket) -> None:
    """Close a connection with a TCP reset (SO_LINGER 0): the peer gets no answer, like a refused connection."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
