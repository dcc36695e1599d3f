"""The live-progress cases (live_progress_triggerer_cases.py) in a Python process of their own: they start Airflow's
real TriggerRunnerSupervisor, which rewires the process's streams (see test_js_ownership_triggerer.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)
REPO = Path(__file__).resolve().parents[2]


def test_live_progress_cases_in_their_own_process(tmp_path):
    cases = Path(__file__).with_name("live_progress_triggerer_cases.py")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "t"),
         str(cases.relative_to(REPO))],
        cwd=REPO, capture_output=True, text=True, timeout=560, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    assert " passed" in done.stdout and "failed" not in done.stdout.splitlines()[-1]
    print([line for line in done.stdout.splitlines() if line.startswith("progress XCom")])
