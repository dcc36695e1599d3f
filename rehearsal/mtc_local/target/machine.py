"""The local target's "cluster": facts about this machine (tmpfs ramdisk room, CPUs, JAX), checked by the core."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from typing import Any

SHM = "/dev/shm"


def filesystem_type(path: str) -> str | None:
    """The fs type of the mount holding `path`, from /proc/mounts (longest matching mount point)."""
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            entries = [line.split()[:3] for line in mounts]
    except OSError:
        return None
    real = os.path.realpath(path)
    best = ("", None)
    for _, mount_point, fstype in entries:
        if (real == mount_point or real.startswith(mount_point.rstrip("/") + "/")) and len(mount_point) >= len(best[0]):
            best = (mount_point, fstype)
    return best[1]


def jax_version(timeout: float = 60.0) -> tuple[str | None, str | None]:
    """(version, error): JAX imported in a child process, so this process does not pay for (or keep) it."""
    if importlib.util.find_spec("jax") is None:
        return None, "jax is not installed"
    try:
        done = subprocess.run([sys.executable, "-c", "import jax; print(jax.__version__)"], capture_output=True,
                              text=True, timeout=timeout, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    except subprocess.TimeoutExpired:
        return None, f"import jax took longer than {timeout} s"
    if done.returncode:
        return None, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
    return done.stdout.strip(), None


def machine_facts(shm_path: str = SHM, check_jax: bool = True) -> dict[str, Any]:
    stats = os.statvfs(shm_path) if os.path.isdir(shm_path) else None
    version, error = jax_version() if check_jax else ("not checked", None)
    return {
        "shm_path": shm_path,
        "shm_fstype": filesystem_type(shm_path),
        "shm_free_bytes": stats.f_bavail * stats.f_frsize if stats else 0,
        "cpu_count": os.cpu_count() or 0,
        "jax_version": version,
        "jax_error": error,
    }
