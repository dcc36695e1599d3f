"""Benchmark 10 (benchmarks/interruption_cost.py): one interruption's cost, fault to the next training step, read
from process 0's events; and a smoke run of its --quick mode (both arms through the local runner: slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.interruption_cost import first_step_after

REPO = Path(__file__).resolve().parents[2]


def test_the_cost_runs_from_the_fault_to_the_first_step_of_the_new_start():
    events = [{"ts": 0.0, "event": "start", "process": 0},
              *[{"ts": float(s), "event": "step", "process": 0, "step": s} for s in range(1, 11)],
              {"ts": 10.2, "event": "step", "process": 1, "step": 11},  # the other slice: not process 0
              {"ts": 10.4, "event": "step", "process": 0, "step": 11},  # the dying start's last step: not counted
              {"ts": 14.0, "event": "start", "process": 0},
              {"ts": 16.0, "event": "restore", "process": 0, "step": 10, "tier": "local"},
              {"ts": 17.5, "event": "step", "process": 0, "step": 11}]
    cost = first_step_after(events, 10.3)
    assert cost == {"fault_to_step_s": 7.2, "fault_to_start_s": 3.7, "start_to_step_s": 3.5, "next_step": 11,
                    "restored_step": 10, "restored_from": "local"}
    with pytest.raises(ValueError, match="no start and step of process 0 after the fault"):
        first_step_after(events[:12], 10.3)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_run_measures_both_arms(tmp_path):
    out = tmp_path / "ic.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.interruption_cost", "--quick", "--output", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=880)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    in_cluster, through_operator = result["runs"]["in_cluster"][0], result["runs"]["operator"][0]
    assert (in_cluster["attempts"], in_cluster["in_cluster_restarts"]) == (1, 1)
    assert (through_operator["attempts"], through_operator["in_cluster_restarts"]) == (2, 0)
    assert in_cluster["last_step"] == through_operator["last_step"] == result["steps"]
    assert result["ratio_operator_over_in_cluster"] > 0
