"""The local target's machine facts: JAX is checked from its distribution metadata, never by importing it.

Benchmark 8 (2026-12-02, 50 concurrent runs at load 20-27 on 2 cores): `import jax` in a child process took over the
60 s bound in 14 of 50 runs' readiness tasks, which then failed the run before any training. The light workload
does not even use JAX.
"""

from __future__ import annotations

import subprocess
from importlib import metadata

import pytest

from mtc_local.target import machine


def test_jax_is_checked_without_starting_a_process(monkeypatch):
    def no_process(*args, **kwargs):
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "run", no_process)
    monkeypatch.setattr(subprocess, "Popen", no_process)
    assert machine.jax_version() == (metadata.version("jax"), None)
    facts = machine.machine_facts()
    assert facts["jax_version"] == metadata.version("jax") and facts["jax_error"] is None


@pytest.mark.parametrize("absent", ["jax", "jaxlib"])
def test_a_missing_jax_or_jaxlib_is_named(monkeypatch, absent):
    real = machine.importlib.util.find_spec
    monkeypatch.setattr(machine.importlib.util, "find_spec", lambda name: None if name == absent else real(name))
    assert machine.jax_version() == (None, f"{absent} not installed")


def test_local_machine_room_is_hosts_times_ramdisk():
    from mtc_provider.core.definition.cluster.readiness import all_ok

    facts = {"shm_path": "/dev/shm", "shm_fstype": "tmpfs", "shm_free_bytes": 1000, "cpu_count": 2, "jax_version": "0.10.2"}
    assert all_ok(machine.evaluate_local_machine(facts, hosts=4, ramdisk_bytes=250))
    checks = {c.name: c for c in machine.evaluate_local_machine(facts, hosts=4, ramdisk_bytes=251)}
    assert not checks["ramdisk_room"].ok and "4 hosts x 251 bytes" in checks["ramdisk_room"].expected
    no_jax = {c.name: c for c in machine.evaluate_local_machine(
        {**facts, "jax_version": None, "jax_error": "No module named jax"}, 1, 1)}
    assert not no_jax["jax_importable"].ok and no_jax["jax_importable"].observed == "No module named jax"
