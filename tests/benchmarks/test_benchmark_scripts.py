"""Benchmarks 1 and 6: the pure analysis over event streams, and a smoke run of each script's --quick mode.

The smoke runs start real JAX/Orbax processes through the local runner (about a minute): marked slow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.checkpoint_overhead import slowest_process, throughput
from benchmarks.common import interleaved, median, ratio
from benchmarks.lost_work import fault_outcomes, restore_split, tmpfs_read_bandwidth

REPO = Path(__file__).resolve().parents[2]


def _steps(process: int, first: int, last: int, t0: float, dt: float = 1.0) -> list[dict]:
    return [{"ts": t0 + (s - first) * dt, "event": "step", "process": process, "step": s, "seconds": 0.5}
            for s in range(first, last + 1)]


def test_sigkill_loses_the_steps_since_the_restored_checkpoint():
    events = [{"ts": 0.0, "event": "start", "process": 0}, *_steps(0, 1, 10, 1.0)]  # step 10 at t=10
    events += [{"ts": 12.0, "event": "start", "process": 0},
               {"ts": 13.0, "event": "restore", "process": 0, "step": 8, "tier": "local", "duration_s": 0.25},
               *_steps(0, 9, 12, 14.0)]  # step 10 again at t=15
    [row] = fault_outcomes(events, [{"kind": "sigkill_host", "at_step": 10, "slice": 0, "host": 0, "ts": 10.5}])
    assert row["last_step_of_attempt"] == 10
    assert (row["restored_step"], row["restore_tier"], row["restore_s"]) == (8, "local", 0.25)
    assert row["steps_lost"] == 2
    assert row["kill_to_first_new_step_s"] == pytest.approx(3.5)
    assert row["time_to_regain_s"] == pytest.approx(4.5)


def test_the_local_restore_splits_into_the_read_and_the_broadcast_against_their_limits():
    """The receiving slice reads nothing (read_s 0) and waits in the broadcast; the restoring slice's read is the
    read; each is compared with its limit (tmpfs read of the same bytes; the modelled bucket)."""
    events = [{"ts": 0.0, "event": "start", "process": 0}, *_steps(0, 1, 10, 1.0),
              {"ts": 12.0, "event": "start", "process": 0},
              {"ts": 13.0, "event": "restore", "process": 0, "step": 8, "tier": "local", "duration_s": 0.9,
               "read_s": 0.0, "broadcast_s": 0.85},
              {"ts": 13.0, "event": "restore", "process": 1, "step": 8, "tier": "local", "duration_s": 0.8,
               "read_s": 0.2, "broadcast_s": 0.55},
              *_steps(0, 9, 12, 14.0)]
    [row] = fault_outcomes(events, [{"kind": "sigkill_host", "at_step": 10, "slice": 0, "host": 0, "ts": 10.5}])
    assert (row["restore_read_s"], row["restore_broadcast_s"]) == (0.2, 0.85)
    result = {"parameters": {"bucket_latency_ms": 50.0, "bucket_mb_per_s": 200.0},
              "tmpfs_read": {"bytes_per_s": 1e9},
              "arms": {"emergency": {"checkpoint": {"bytes": 100_000_000, "objects": 64}, "faults": [row]}}}
    [split] = restore_split(result)
    assert split["tmpfs_read_s"] == pytest.approx(0.1) and split["read_over_tmpfs"] == pytest.approx(2.0)
    assert split["modelled_bucket_s"] == pytest.approx(2 * 0.05 + 0.5)  # ceil(64 / 32) x 50 ms + 100 MB / 200 MB/s
    measured = tmpfs_read_bandwidth(4 << 20, repeats=1)
    assert measured is None or (measured["bytes"] == 4 << 20 and measured["bytes_per_s"] > 0)


def test_preemption_with_autocheckpoint_loses_nothing_and_a_restart_from_scratch_loses_everything():
    events = [{"ts": 0.0, "event": "start", "process": 0}, *_steps(0, 1, 7, 1.0),
              {"ts": 7.5, "event": "preempted", "process": 0, "step": 7, "saved": True},
              {"ts": 9.0, "event": "start", "process": 0},
              {"ts": 10.0, "event": "restore", "process": 0, "step": 7, "tier": "persistent", "duration_s": 0.1},
              *_steps(0, 8, 12, 11.0),  # step 12 at t=15
              {"ts": 20.0, "event": "start", "process": 0}, *_steps(0, 1, 3, 21.0)]
    faults = [{"kind": "sigterm_slice", "at_step": 6, "slice": 1, "ts": 6.2},
              {"kind": "wipe_ramdisk", "at_step": 12, "slice": 1, "host": 0, "ts": 15.5}]
    term, wipe = fault_outcomes(events, faults)
    # SIGTERM at t=6.2 (after step 6): the workload finishes step 7, saves it and resumes from it.
    assert (term["last_step_before_fault"], term["last_step_of_attempt"]) == (6, 7)
    assert (term["steps_lost"], term["preemption_saved"], term["restore_tier"]) == (0, True, "persistent")
    assert (wipe["restored_step"], wipe["restore_tier"], wipe["steps_lost"]) == (0, "none", 12)
    assert wipe["restore_s"] is None


def test_a_fault_without_a_next_attempt_has_no_recovery_figures():
    events = [{"ts": 0.0, "event": "start", "process": 0}, *_steps(0, 1, 4, 1.0)]
    [row] = fault_outcomes(events, [{"kind": "kill_slice", "slice": 0, "ts": 4.5}])
    assert row["last_step_of_attempt"] == 4
    assert row["steps_lost"] is None and row["kill_to_first_new_step_s"] is None


def test_throughput_counts_steps_after_warmup_and_time_between_steps():
    events = _steps(0, 1, 11, 0.0, dt=2.0) + _steps(1, 1, 11, 0.0, dt=9.0)  # process 1 is ignored
    measured = throughput(events, warmup=1)
    assert measured["steps"] == 10 and measured["seconds"] == pytest.approx(20.0)
    assert measured["steps_per_s"] == pytest.approx(0.5)
    assert measured["between_steps_s"] == pytest.approx(1.5)  # 2 s per step, 0.5 s of it inside the step
    with pytest.raises(ValueError, match="warmup"):
        throughput(_steps(0, 1, 3, 0.0), warmup=3)


def test_the_slowest_process_sets_the_run_throughput():
    saves = [{"ts": 3.0, "event": "save_start", "process": 1, "step": 2}]
    events = _steps(0, 1, 11, 0.0, dt=2.0) + _steps(1, 1, 11, 0.0, dt=3.0) + saves
    run = slowest_process(events, warmup=1)
    assert run["slowest_process"] == 1 and run["steps_per_s"] == pytest.approx(10 / 30)
    assert run["per_process"]["0"]["steps_per_s"] == pytest.approx(0.5)
    assert run["per_process"]["1"]["saves"] == 1 and run["per_process"]["0"]["saves"] == 0


def test_interleaved_alternates_the_order_and_ratio_handles_missing_values():
    calls = []
    runs = interleaved({"a": lambda: calls.append("a") or 1, "b": lambda: calls.append("b") or 2}, 3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert runs == {"a": [1, 1, 1], "b": [2, 2, 2]}
    assert ratio(1.0, 0) is None and ratio(None, 1.0) is None and ratio(1.0, 4.0) == 0.25
    assert median([3.0, None, 1.0, 2.0]) == 2.0 and median([None]) is None


def _run_quick(module: str, output: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", module, "--quick", "--output", str(output)], cwd=REPO,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(output.read_text())


@pytest.mark.slow
def test_lost_work_quick_run_writes_a_result(tmp_path):
    result = _run_quick("benchmarks.lost_work", tmp_path / "lost_work.json")
    assert {"date", "command", "machine", "parameters", "arms", "ratios", "expected_lost_ratio"} <= set(result)
    assert "--quick" in result["command"]
    for arm in ("emergency", "persistent"):
        data = result["arms"][arm]
        assert data["finished_step"] == result["parameters"]["steps"]
        assert data["faults_fired"] == 1 and data["faults"][0]["steps_lost"] is not None
        assert 0 < data["goodput"] <= 1
    assert result["arms"]["emergency"]["faults"][0]["restore_tier"] == "local"
    # the emergency manager's own split of that restore (Orbax's step statistics), and its limits measured alongside
    assert result["arms"]["emergency"]["faults"][0]["restore_broadcast_s"] is not None
    assert result["restore_split"] and result["restore_split"][0]["tmpfs_read_s"] is not None
    assert result["arms"]["persistent"]["faults"][0]["restore_tier"] == "persistent"
    assert result["same_final_params"] is True  # same seed, exact restores: bit-identical parameters
    assert set(result["ratios"]) >= {"steps_lost_hard_faults", "goodput", "wall_s", "per_fault"}


@pytest.mark.slow
def test_checkpoint_overhead_quick_run_writes_a_result(tmp_path):
    result = _run_quick("benchmarks.checkpoint_overhead", tmp_path / "overhead.json")
    assert {"date", "command", "parameters", "configs", "median_ratio", "goal", "goal_met"} <= set(result)
    [config] = result["configs"]
    assert set(config["runs"]) == {"none", "emergency"}
    assert all(run["steps_per_s"] > 0 for runs in config["runs"].values() for run in runs)
    none, emergency = config["runs"]["none"][0], config["runs"]["emergency"][0]
    assert set(none["per_process"]) == set(emergency["per_process"]) == {"0", "1"}  # every process measured
    assert sum(p["saves"] for p in none["per_process"].values()) == 0
    assert all(p["saves"] > 0 for p in emergency["per_process"].values())  # each replica writes its tier
    assert 0 < config["median_ratio"] == result["median_ratio"]["0"]
