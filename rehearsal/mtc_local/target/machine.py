"""The local target's "cluster": facts about this machine (tmpfs ramdisk room, CPUs, JAX) and its readiness checks."""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Mapping

from mtc_provider.core.basics.install import install_line
from mtc_provider.core.definition.cluster.readiness import Check

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


def evaluate_local_machine(facts: Mapping[str, Any], hosts: int, ramdisk_bytes: int, min_cpus: int = 2) -> list[Check]:
    """The local target's readiness from observed facts (shm path, free bytes, fs type, CPUs, JAX)."""
    needed = hosts * ramdisk_bytes
    shm = facts.get("shm_path", "/dev/shm")
    return [
        Check("ramdisk_tmpfs", facts.get("shm_fstype") == "tmpfs", facts.get("shm_fstype"), f"tmpfs at {shm}",
              f"mount -t tmpfs -o size={needed} tmpfs {shm}"),
        Check("ramdisk_room", (facts.get("shm_free_bytes") or 0) >= needed, facts.get("shm_free_bytes"),
              f">= {needed} bytes ({hosts} hosts x {ramdisk_bytes} bytes)",
              f"mount -o remount,size={needed} {shm}  (or lower sizing.parameters)"),
        Check("cpu_count", (facts.get("cpu_count") or 0) >= min_cpus, facts.get("cpu_count"), f">= {min_cpus}",
              "run on a machine with more CPUs"),
        Check("jax_importable", bool(facts.get("jax_version")), facts.get("jax_version") or facts.get("jax_error"),
              "jax importable", f"{install_line('local')} (after make dist)"),
    ]
