"""Who this process is in the job: its process id, the coordinator, and the job's shape.

Every process of the job runs the same command; its identity comes from the ramdisk file
``<local_checkpoint_directory>/jax-init-info.txt`` (line 1: process id, line 2: coordinator
``host:port``, as written by the GKE MTC driver) or, failing that, from the environment
(``MTC_PROCESS_ID``, ``MTC_COORDINATOR_ADDRESS``). The job size is
``MTC_NUM_SLICES * MTC_HOSTS_PER_SLICE``.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import time
from pathlib import Path

from mtc_provider.core.basics.vocabulary import (
    ENV_COORDINATOR_ADDRESS,
    ENV_HOSTS_PER_SLICE,
    ENV_NUM_SLICES,
    ENV_PROCESS_ID,
    INIT_INFO_FILENAME,
)
from mtc_local.workload.flags import (
    EXIT_BAD_CONFIG,
    EXIT_RETRYABLE,
    Config,
    FlagError,
    RetryableError,
    parse_flags,
)


@dataclasses.dataclass(frozen=True)
class Identity:
    process_id: int
    num_processes: int
    coordinator_address: str
    num_slices: int
    hosts_per_slice: int
    source: str  # "init-info-file" | "env" | "single-process"

    @property
    def coordinator_bind_address(self) -> str | None:
        """Where process 0's JAX coordinator listens. JAX binds `[::]:<port>` (every interface) unless told, and the
        coordinator has no authentication; on the local target every process dials 127.0.0.1, so it listens on the
        loopback only. A coordinator on another host (None) keeps JAX's default: its peers must reach it."""
        host, _, port = self.coordinator_address.rpartition(":")
        if host.strip("[]") in ("127.0.0.1", "localhost", "::1") and port.isdigit():
            return f"{host}:{port}"
        return None

    @property
    def slice_index(self) -> int:
        """The slice (replica) this process belongs to in the mesh."""
        return self.process_id // self.hosts_per_slice


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise FlagError(f"environment variable {name}: bad value {raw!r}; allowed: an integer") from None
    return value


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_init_info(path: str | os.PathLike) -> tuple[int, str] | None:
    """Parse ``jax-init-info.txt`` (line 1 process id, line 2 coordinator address)."""
    try:
        lines = [ln.strip() for ln in Path(path).read_text().splitlines() if ln.strip()]
    except (FileNotFoundError, NotADirectoryError):
        return None
    if len(lines) < 2:
        return None
    try:
        return int(lines[0]), lines[1]
    except ValueError:
        return None


def resolve_identity(cfg: Config, wait_s: float = 10.0) -> Identity:
    num_slices = _env_int(ENV_NUM_SLICES, 1)
    hosts = _env_int(ENV_HOSTS_PER_SLICE, 1)
    if num_slices < 1 or hosts < 1:
        raise FlagError(f"{ENV_NUM_SLICES} and {ENV_HOSTS_PER_SLICE} must be >= 1")
    total = num_slices * hosts

    info = None
    source = ""
    info_path = Path(cfg.local_checkpoint_directory) / INIT_INFO_FILENAME if cfg.local_checkpoint_directory else None
    if info_path is not None:
        info = read_init_info(info_path)
        source = "init-info-file"
    if info is None and os.environ.get(ENV_PROCESS_ID, "") != "":
        pid = _env_int(ENV_PROCESS_ID, 0)
        coord = os.environ.get(ENV_COORDINATOR_ADDRESS, "")
        if not coord:
            if total != 1:
                raise FlagError(f"{ENV_PROCESS_ID} is set but {ENV_COORDINATOR_ADDRESS} is not")
            coord = f"127.0.0.1:{_free_port()}"
        info, source = (pid, coord), "env"
    if info is None and info_path is not None and cfg.enable_emergency_checkpoint and total > 1:
        # The MTC driver writes the file into the ramdisk; give it a moment, then call it transient.
        deadline = time.monotonic() + wait_s
        while info is None and time.monotonic() < deadline:
            time.sleep(0.2)
            info = read_init_info(info_path)
        if info is None:
            raise RetryableError(f"{info_path} did not appear within {wait_s:.0f}s")
        source = "init-info-file"
    if info is None:
        if total != 1:
            raise FlagError(
                f"cannot determine the process id: no {INIT_INFO_FILENAME} in local_checkpoint_directory"
                f" and no {ENV_PROCESS_ID}/{ENV_COORDINATOR_ADDRESS} in the environment"
            )
        info, source = (0, f"127.0.0.1:{_free_port()}"), "single-process"
    pid, coord = info
    if not 0 <= pid < total:
        raise FlagError(f"process id {pid} out of range for {num_slices} slices x {hosts} hosts")
    return Identity(pid, total, coord, num_slices, hosts, source)


def configure(argv: list[str]) -> tuple[Config, Identity] | int:
    """A workload process's flags and identity, or the exit code of why there are none (the error on stderr):
    a bad flag is not retryable, a missing identity (the ramdisk's init file not yet there) is."""
    try:
        cfg = parse_flags(argv)
        return cfg, resolve_identity(cfg)
    except FlagError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return EXIT_BAD_CONFIG
    except RetryableError as err:
        print(f"error (retryable): {err}", file=sys.stderr, flush=True)
        return EXIT_RETRYABLE
