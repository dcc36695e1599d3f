"""The local target's "cluster": facts about this machine (tmpfs ramdisk room, CPUs, JAX), checked by the core."""

from __future__ import annotations

import importlib.util
import os
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


def jax_version() -> tuple[str | None, str | None]:
    """(version, error) of the installed JAX, from its distribution metadata: no import, so no process and no
    seconds. Importing JAX to ask took 5 s quiet and over 60 s when 50 runs' readiness checks ran at once on a
    loaded 2-core machine (benchmark 8, 2026-12-02: 14 of 50 runs failed readiness on that time-out)."""
    from importlib import metadata

    missing = [name for name in ("jax", "jaxlib") if importlib.util.find_spec(name) is None]
    if missing:
        return None, f"{' and '.join(missing)} not installed"
    try:
        return metadata.version("jax"), None
    except metadata.PackageNotFoundError:
        return None, "jax has no distribution metadata (not installed by pip or uv)"


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
