"""One pod = one OS process group: start it, signal it, read its log. The only module here that forks."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from mtc_provider.core.basics.vocabulary import INIT_INFO_FILENAME as INIT_INFO
from mtc_local.runner.faults import last_step
from mtc_local.runner.manifest import PodSpec, ReplicatedJob
from mtc_local.runner.policy import exit_code

COMMAND_NOT_FOUND = 127
# The alphabet of generated name suffixes (k8s.io/apimachinery/pkg/util/rand: no vowels, no confusable digits).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _suffix() -> str:
    return "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for the JAX coordinator (chosen again at every JobSet (re)start)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_init_info(ramdisk: Path, process_id: int, coordinator: str) -> None:
    """Write jax-init-info.txt at the ramdisk root as the GKE MTC driver does: process id, then coordinator."""
    ramdisk.mkdir(mode=0o700, parents=True, exist_ok=True)  # under the checked private root (ramdisk.py)
    tmp = ramdisk / f".{INIT_INFO}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)  # never through a link
    with os.fdopen(fd, "w") as handle:
        handle.write(f"{process_id}\n{coordinator}\n")
    os.replace(tmp, ramdisk / INIT_INFO)


@dataclass
class Pod:
    spec: PodSpec
    rj: ReplicatedJob
    job_index: int
    restart: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    pid: int | None = None
    create_time: float | None = None
    started: float = 0.0
    exit_code: int | None = None
    finished: float | None = None
    stopped: bool = False
    kill_at: float | None = None  # SIGKILL deadline after a SIGTERM (terminationGracePeriodSeconds)
    step: int | None = None
    created: float = field(default_factory=time.time)
    suffix: str = field(default_factory=_suffix)  # the Pod object's name is <hostname>-<suffix>, as a Job names it
    deletion_timestamp: str | None = None  # set when the pod is being deleted (JobSet delete or restart)
    deletion_grace: float | None = None  # the grace period of a pod deleted through the API (DeleteOptions)
    removed: bool = False  # deleted through the API: the Pod object goes once the process has ended
    held: str | None = None  # a start fault (image_pull, unschedulable) keeping the pod Pending, no process
    held_until: float | None = None  # when the hold ends and the process starts (None: never)
    # (end offset, unix time) of each chunk of log read: the time a line arrived, for `kubectl logs --timestamps`.
    log_times: list[tuple[int, float]] = field(default_factory=list, repr=False)
    _offset: int = 0
    _handled: bool = field(default=False, repr=False)
    conditions: tuple[str, ...] = ()  # condition types a fault set (DisruptionTarget), for onPodConditions rules

    @property
    def object_name(self) -> str:
        return f"{self.spec.name}-{self.suffix}"

    def hold(self, kind: str, seconds: float | None) -> None:
        """Keep the pod Pending (image not pulled / not scheduled) for `seconds`, or for ever."""
        self.held, self.held_until = kind, None if seconds is None else time.time() + seconds

    def release_due(self, now: float) -> bool:
        """Start a held pod whose hold has ended; True when it started."""
        if self.held is None or self.held_until is None or now < self.held_until:
            return False
        self.start()
        return True

    def start(self) -> None:
        self.held = self.held_until = None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.started = time.time()
        with open(self.log_path, "ab") as log:
            try:
                # A new session per pod: signals reach the whole process tree, as a container's cgroup would.
                self.proc = subprocess.Popen(
                    list(self.spec.argv),
                    env=self.spec.env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as err:
                log.write(f"local runner: cannot start {self.spec.argv[0]!r}: {err}\n".encode())
                self.exit_code, self.finished = COMMAND_NOT_FOUND, time.time()
                return
        self.pid = self.proc.pid
        try:
            self.create_time = psutil.Process(self.pid).create_time()
        except psutil.Error:
            self.create_time = None

    @property
    def gone(self) -> bool:
        """Deleted through the API and terminated: no longer a Pod object (its Job still counts its outcome)."""
        return self.removed and not self.alive

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.exit_code is None

    def poll(self) -> bool:
        """Reap the process; True when it exited in this call."""
        if not self.alive:
            return False
        assert self.proc is not None
        code = self.proc.poll()
        if code is None:
            return False
        self.exit_code, self.finished = exit_code(code), time.time()
        return True

    def signal(self, sig: int) -> None:
        if self.alive and self.pid is not None:
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                pass
            if sig == signal.SIGSTOP:
                self.stopped = True
            elif sig in (signal.SIGCONT, signal.SIGKILL):
                self.stopped = False

    def terminate(self, grace: float) -> None:
        """SIGTERM now (and SIGCONT, so a hung pod can handle it); SIGKILL at the deadline."""
        if self.alive:
            self.signal(signal.SIGTERM)
            self.signal(signal.SIGCONT)
            self.kill_at = time.time() + grace if self.kill_at is None else min(self.kill_at, time.time() + grace)

    def enforce_deadline(self, now: float) -> None:
        if self.alive and self.kill_at is not None and now >= self.kill_at:
            self.signal(signal.SIGKILL)

    def read_steps(self) -> int | None:
        """Tail the log for `completed step: N` lines (complete lines only)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._offset)
                chunk = log.read()
        except FileNotFoundError:
            return self.step
        end = chunk.rfind(b"\n") + 1
        if end:
            self.step = last_step(chunk[:end], self.step)
            self._offset += end
            self.log_times.append((self._offset, time.time()))
        return self.step

    def record(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "slice": self.spec.slice_index,
            "host": self.spec.host,
            "processId": self.spec.process_id,
            "pid": self.pid,
            "createTime": self.create_time,
            "restart": self.restart,
            "log": str(self.log_path),
            "ramdisk": str(self.spec.ramdisk),
            "started": self.started,
            "exitCode": self.exit_code,
            "finished": self.finished,
            "stopped": self.stopped,
            "held": self.held,
            "step": self.step,
        }


def kill_leftover(record: dict[str, Any]) -> None:
    """SIGKILL a pod recorded by a supervisor that died, if that very process (same start time) still runs."""
    pid, created = record.get("pid"), record.get("createTime")
    if not pid or record.get("exitCode") is not None:
        return
    try:
        if created is None or abs(psutil.Process(pid).create_time() - created) > 0.01:
            return
        os.killpg(pid, signal.SIGKILL)
    except (psutil.Error, ProcessLookupError, PermissionError):
        pass
