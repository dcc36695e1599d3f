"""Benchmarks 3-5 (sensing cost, triggerer load, DAG parse time): their helpers, and a smoke run of each script's
--quick mode that checks the figures it writes are the ones the benchmark claims to measure.

The triggerer and DAG-parse smoke runs take 30-90 s on the shared machine (Airflow imports in fresh
processes, several seconds of event loop per scenario): marked slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.sensing_cost import (
    FsCalls,
    backup_objects,
    make_local_tree,
    naive_walk,
    newest_backup_from_names,
    step_objects,
)
from benchmarks.triggerer_load import jobset_script, percentile
from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore
from mtc_provider.core.measure.listing import finalized_from_objects
from mtc_provider.core.attempt.status import evaluate_jobset

REPO = Path(__file__).resolve().parents[2]


def _run_quick(module: str, output: Path, timeout: float = 400) -> dict:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-m", module, "--quick", "--output", str(output)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(output.read_text())


# ---- helpers --------------------------------------------------------------------------------------------------
def test_seeded_layouts_parse_to_the_expected_steps():
    names = step_objects("r/checkpoints", 12)
    assert len(names) == 4 * 12 + 1  # four objects per step plus one in-flight save
    assert finalized_from_objects(names, "r/checkpoints") == list(range(1, 13))
    assert newest_backup_from_names(backup_objects("r/train", 5), "r/train") == 5
    assert newest_backup_from_names(backup_objects("r/train", 5)[:-1], "r/train") == 4  # step 5's data is missing


def test_local_tree_walk_and_store_agree_and_calls_are_counted(tmp_path):
    root = tmp_path / "checkpoints"
    make_local_tree(root, 7)
    assert naive_walk(root) == list(range(1, 8))
    with FsCalls() as calls:
        found = LocalCheckpointStore().finalized(str(root), after=5)
    assert [info.step for info in found] == [6, 7]
    assert (calls.scandir, calls.stat) == (1, 2)  # one listing, one commit-marker stat per new step
    with FsCalls() as calls:
        naive_walk(root)
    # root; 7 steps x (step dir, default/, default/d/); the in-flight save and its default/
    assert calls.scandir == 1 + 7 * 3 + 2 and calls.stat == 0
    assert os.scandir.__module__ == "posix"  # restored


def test_percentile_and_jobset_scripts():
    assert percentile([], 99) is None
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) in (50.0, 51.0) and percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    script = jobset_script(0, 8, completes=True)
    states = [evaluate_jobset({"metadata": {"name": "t"}, "status": frame}) for frame in script]
    assert not any(s.ended for s in states[:-1]) and states[-1].ended and states[-1].phase == "succeeded"
    assert states[-2].restarts == 2  # a restart every fourth frame
    assert not evaluate_jobset({"metadata": {"name": "t"}, "status": jobset_script(0, 5, False)[-1]}).ended


# ---- smoke runs of the scripts ---------------------------------------------------------------------------------
def test_sensing_cost_quick_run(tmp_path):
    result = _run_quick("benchmarks.sensing_cost", tmp_path / "sensing.json", timeout=180)
    assert {"date", "command", "machine", "parameters", "gcs", "local", "ratios"} <= set(result)
    for item in result["gcs"]:
        dirs, arms = item["dirs"], item["arms"]
        pages = -(-(4 * dirs + 1) // 1000)  # 1,000 entries a page, observed at the listing server
        assert arms["ours_first"]["http_requests"] == 1 and arms["ours_first"]["gcs_entries"] == dirs
        assert arms["ours_next"]["http_requests"] == 2 and arms["ours_next"]["gcs_entries"] == 0
        assert arms["ours_next"]["start_offset_requests"] == 1  # same-length names; the longer ones have none
        assert arms["naive"]["gcs_entries"] == 4 * dirs + 1 and arms["naive"]["http_requests"] == pages
        # ours: every `.meta`, then one delimiter listing of the newest step's folder (its data folder)
        assert arms["ours_backup"]["gcs_entries"] == dirs + 1 and arms["naive_backup"]["gcs_entries"] == 2 * dirs
        assert all(arm["seconds_median"] > 0 for arm in arms.values())
    for item in result["local"]:
        dirs, arms = item["dirs"], item["arms"]
        assert arms["ours_first"]["fs_calls"] == 1 + dirs and arms["ours_next"]["fs_calls"] == 1
        assert arms["naive"]["fs_calls"] > 3 * dirs
    assert set(result["ratios"]["gcs"]) == {str(c) for c in result["parameters"]["counts"]}


@pytest.mark.slow
def test_triggerer_load_quick_run(tmp_path):
    result = _run_quick("benchmarks.triggerer_load", tmp_path / "triggerer.json")
    summary = result["summary"]
    assert set(summary) == {"baseline", "checkpoint", "jobset", "mixed"}
    for kind, data in summary.items():
        assert data["lag_p50_ms"] is not None and data["lag_p99_ms"] >= data["lag_p50_ms"] >= 0
        assert 0 <= data["cpu_fraction"] < 2.5
    [run] = result["runs"]["checkpoint"]
    assert run["triggers"] == 100 and run["probe_samples"] > 50
    assert run["listings"] >= 100 and run["steps_written"] > 0  # every trigger polled its directory
    assert run["trigger_events"] > 0  # triggers whose target step was written fired
    [run] = result["runs"]["jobset"]
    assert run["watch_events"] >= 100 and run["trigger_events"] > 0  # the completing JobSets ended
    assert result["runs"]["baseline"][0]["listings"] == 0 and result["runs"]["baseline"][0]["idle_tasks"] == 100


@pytest.mark.slow
def test_dag_parse_time_quick_run(tmp_path):
    result = _run_quick("benchmarks.dag_parse_time", tmp_path / "parse.json")
    assert result["parameters"]["bytecode_cached"] and result["parameters"]["gc_freeze"]
    summary = result["summary"]
    assert set(summary) == {"one_task", "mtc_checkpoint_evaluation.py"}
    assert summary["one_task"]["dags"] == 1 and summary["one_task"]["tasks"] == 1
    assert summary["one_task"]["ratio_one_task"] == 1.0
    evaluation = summary["mtc_checkpoint_evaluation.py"]
    assert evaluation["dags"] == 1 and evaluation["tasks"] >= 1 and evaluation["import_errors"] == []
    assert evaluation["processor_s"] > 0 and evaluation["ratio_one_task"] > 0
    assert evaluation["samples"] == 1  # 1 round x 2 parses, the first (writing .pyc files) discarded
    assert evaluation["goal_one_task_met"] == (evaluation["ratio_one_task"] <= 1.2)
