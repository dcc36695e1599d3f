"""The light workload's multi-tier mode (as MaxText's): only the local tier, a resume from it, its flags checked;
the JAX workload refuses the mode. The replicator that backs the local tier up is tests/rehearsal/runner/
test_replicator.py's; end to end: tests/operators/jobset/test_js_local_multi_tier.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mtc_provider.adapters.workload_events import read_events


def _run(tmp: Path, *flags: str):
    argv = [sys.executable, "-m", "mtc_local.light_workload", "run_name=r", f"base_output_directory={tmp}", *flags]
    return subprocess.run(argv, env={**os.environ, "MTC_PROCESS_ID": "0"}, capture_output=True, text=True, timeout=60)



MULTI_TIER_FLAGS = ("enable_multi_tier_checkpointing=True", "multi_tier_checkpointing_backup_interval_steps=4",
                    "local_checkpoint_period=3", "checkpoint_period=2", "step_time_ms=1")


def test_multi_tier_mode_saves_only_the_local_tier_and_resumes_from_it(tmp_path: Path):
    """As MaxText in multi-tier mode: no persistent checkpoint (checkpoint_period=2 notwithstanding), the ramdisk
    every local_checkpoint_period steps and the last step; a restart resumes from the ramdisk (which MTC, here the
    runner's replicator, has filled) and logs the restored step."""
    local = tmp_path / "ramdisk"
    first = _run(tmp_path / "bucket", "steps=10", f"local_checkpoint_directory={local}", *MULTI_TIER_FLAGS)
    assert first.returncode == 0, first.stderr
    assert not list((tmp_path / "bucket").rglob("commit_success.txt"))
    assert sorted(int(p.name) for p in local.iterdir() if p.name.isdigit()) == [9, 10]  # max_to_keep 2
    second = _run(tmp_path / "bucket", "steps=14", f"local_checkpoint_directory={local}", *MULTI_TIER_FLAGS)
    assert second.returncode == 0, second.stderr
    assert "restored step 10 from tier local" in second.stdout and "completed step: 11," in second.stdout
    events = read_events(tmp_path / "bucket" / "r" / "events")
    assert [(e["step"], e["tier"]) for e in events if e["event"] == "restore"] == [(10, "local")]


def test_multi_tier_flags_are_checked_and_the_jax_workload_refuses_the_mode(tmp_path: Path):
    both = _run(tmp_path, "enable_emergency_checkpoint=True", f"local_checkpoint_directory={tmp_path / 'l'}",
                *MULTI_TIER_FLAGS)
    assert both.returncode == 2 and "enable_multi_tier_checkpointing" in both.stderr, both.stderr
    no_period = _run(tmp_path, "enable_multi_tier_checkpointing=True", f"local_checkpoint_directory={tmp_path / 'l'}")
    assert no_period.returncode == 2 and "local_checkpoint_period" in no_period.stderr, no_period.stderr
    jax = subprocess.run([sys.executable, "-m", "mtc_local.workload", "run_name=r", f"base_output_directory={tmp_path}",
                          f"local_checkpoint_directory={tmp_path / 'l'}", *MULTI_TIER_FLAGS],
                         env={**os.environ, "MTC_PROCESS_ID": "0"}, capture_output=True, text=True, timeout=120)
    assert jax.returncode == 2 and "light_workload" in jax.stderr, jax.stderr
    assert not (tmp_path / "r").exists()  # refused before any side effect
