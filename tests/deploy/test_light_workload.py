"""The light workload (load tests only): Orbax's on-disk layout without JAX, resumes, preemption, bad flags.

Orbax itself reads what it writes (`orbax.checkpoint.step.latest_step_metadata` with the standard name format,
which skips `<step>.orbax-checkpoint-tmp`), and so does the provider's own listing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore
from mtc_local.light_workload import finalized_steps, write_persistent
from mtc_provider.adapters.workload_events import read_events


def _run(tmp: Path, *flags: str, env: dict[str, str] | None = None, wait: bool = True):
    argv = [sys.executable, "-m", "mtc_local.light_workload", "run_name=r",
            f"base_output_directory={tmp}", *flags]
    full_env = {**os.environ, "MTC_PROCESS_ID": "0", **(env or {})}
    if not wait:
        return subprocess.Popen(argv, env=full_env, stdout=subprocess.PIPE, text=True)
    return subprocess.run(argv, env=full_env, capture_output=True, text=True, timeout=60)


def test_checkpoints_are_orbax_layout_and_a_rerun_resumes(tmp_path: Path):
    import orbax.checkpoint as ocp

    first = _run(tmp_path, "steps=12", "checkpoint_period=5", "step_time_ms=1")
    assert first.returncode == 0, first.stderr
    assert "completed step: 12" in first.stdout
    checkpoints = tmp_path / "r" / "checkpoints"
    assert finalized_steps(checkpoints) == [5, 10, 12]
    meta = ocp.step.latest_step_metadata(checkpoints, ocp.step.standard_name_format())
    assert meta is not None and meta.step == 12
    assert [c.step for c in LocalCheckpointStore().finalized_steps(str(checkpoints))] == [5, 10, 12]
    stamps = json.loads((checkpoints / "12" / "_CHECKPOINT_METADATA").read_text())
    assert stamps["init_timestamp_nsecs"] <= stamps["commit_timestamp_nsecs"]

    second = _run(tmp_path, "steps=20", "checkpoint_period=5", "step_time_ms=1")
    assert second.returncode == 0, second.stderr
    events = read_events(tmp_path / "r" / "events")
    assert [(e["step"], e["tier"]) for e in events if e["event"] == "restore"] == [(12, "persistent")]
    assert "completed step: 13" in second.stdout and "completed step: 12," not in second.stdout
    finishes = [e for e in events if e["event"] == "finish"]
    assert [e["step"] for e in finishes] == [12, 20] and finishes[0]["params_sha256"] != finishes[1]["params_sha256"]


def test_the_step_rate_follows_step_time_ms(tmp_path: Path):
    started = time.monotonic()
    assert _run(tmp_path, "steps=20", "step_time_ms=50").returncode == 0
    assert 1.0 <= time.monotonic() - started < 10  # 20 steps x 50 ms, plus interpreter start-up


def test_a_step_killed_before_its_commit_file_is_not_finalized(tmp_path: Path):
    checkpoints = tmp_path / "c"
    write_persistent(checkpoints, 5, "items", b"x")
    (checkpoints / "7.orbax-checkpoint-tmp" / "items").mkdir(parents=True)  # killed mid-save
    (checkpoints / "9").mkdir()  # renamed, killed before the commit file
    assert finalized_steps(checkpoints) == [5]
    assert [c.step for c in LocalCheckpointStore().finalized_steps(str(checkpoints))] == [5]


def test_sigterm_saves_the_step_and_exits_zero_below_the_target(tmp_path: Path):
    proc = _run(tmp_path, "steps=1000", "checkpoint_period=500", "step_time_ms=20",
                "enable_autocheckpoint=True", wait=False)
    for line in proc.stdout:
        if line.startswith("completed step: 5,"):
            proc.send_signal(signal.SIGTERM)
            break
    assert proc.wait(30) == 0
    saved = finalized_steps(tmp_path / "r" / "checkpoints")
    assert len(saved) == 1 and 5 <= saved[0] < 1000
    events = read_events(tmp_path / "r" / "events")
    assert [e["saved"] for e in events if e["event"] == "preempted"] == [True]
    assert not [e for e in events if e["event"] == "finish"]


def test_emergency_mode_writes_local_copies_on_slices_other_than_zero(tmp_path: Path):
    # Both processes of the two-slice job: a start waits for every process, as jax.distributed.initialize does.
    ramdisks = [tmp_path / f"ramdisk-{i}" for i in range(2)]
    procs = []
    for i, ramdisk in enumerate(ramdisks):
        ramdisk.mkdir()
        (ramdisk / "jax-init-info.txt").write_text(f"{i}\n127.0.0.1:1234\n")
        procs.append(_run(tmp_path, "steps=9", "checkpoint_period=100", "step_time_ms=1",
                          "enable_emergency_checkpoint=True", f"local_checkpoint_directory={ramdisk}",
                          "local_checkpoint_period=2", "local_checkpoint_max_to_keep=2",
                          env={"MTC_NUM_SLICES": "2", "MTC_HOSTS_PER_SLICE": "1", "MTC_PROCESS_ID": ""}, wait=False))
    assert [proc.wait(60) for proc in procs] == [0, 0]
    assert sorted(int(d.name) for d in ramdisks[1].iterdir() if d.is_dir()) == [6, 8]
    assert not [d for d in ramdisks[0].iterdir() if d.is_dir()]  # slice 0 writes no local copy
    assert finalized_steps(tmp_path / "r" / "checkpoints") == [9]  # only slice 0 writes persistent (the last step)


@pytest.mark.parametrize("flag, message", [("steps=0", "flag steps: bad value 0"),
                                           ("colour=red", "unknown flag 'colour'")])
def test_bad_flags_exit_2_naming_the_flag(tmp_path: Path, flag: str, message: str):
    done = _run(tmp_path, flag)
    assert done.returncode == 2 and message in done.stderr
    assert not (tmp_path / "r").exists()  # nothing written


def test_importing_it_does_not_import_jax():
    code = "import sys, mtc_local.light_workload; print('jax' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_each_save_records_how_long_it_blocked_training_and_goodput_counts_it(tmp_path: Path):
    """Issue 35 item 6: `save_blocking` after each save (its tier, blocking_s), so the goodput's checkpoint_save
    badput is the time saves held training up, not 0 s."""
    from mtc_provider.core.view.goodput import compute_goodput, timeline_from_workload_events

    run = _run(tmp_path, "steps=12", "checkpoint_period=3", "step_time_ms=1")
    assert run.returncode == 0, run.stderr
    events = read_events(tmp_path / "r" / "events")
    blocking = [e for e in events if e["event"] == "save_blocking"]
    assert [(e["step"], e["tier"]) for e in blocking] == [(s, "persistent") for s in (3, 6, 9, 12)]
    assert all(e["blocking_s"] > 0 for e in blocking), blocking
    report = compute_goodput(timeline_from_workload_events(events))
    assert report.badput_s["checkpoint_save"] == pytest.approx(sum(e["blocking_s"] for e in blocking), abs=1e-6)
