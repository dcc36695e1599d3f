"""A two-slice light-workload run on the local target, as the local-target operator tests build it.

The light workload saves only where a TPU slice could (a local save every 2 steps, a persistent one every
`persistent` steps), so a decision these tests check holds for a real run's cadence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def home(tmp_path):
    """The local target's home, its cluster stopped (by PID) after the test."""
    from mtc_local.cluster.lifecycle import stop

    yield tmp_path / "home"
    stop(tmp_path / "home")


def light_run_operator(tmp_path: Path, home: Path, name: str, steps: int, persistent: int,
                       faults: list[dict[str, Any]], workload: dict[str, Any] | None = None, **operator: Any):
    """The launch operator for run `name` (its JobSet too), 150 ms a step, checkpoints under tmp_path/bucket."""
    from mtc_provider.operators.jobset import MtcJobSetOperator

    return MtcJobSetOperator(
        task_id="train", target={"kind": "local", "home": str(home)},
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": name, "base_output_directory": str(tmp_path / "bucket"), "steps": steps,
                       "enable_emergency_checkpoint": True, "local_checkpoint_directory": "/local",
                       "local_checkpoint_period": 2, "checkpoint_period": persistent, "enable_autocheckpoint": True},
        workload={"jobset_name": name, "image": "local", "command": ["python3", "-m", "mtc_local.light_workload"],
                  "extra_flags": {"seed": 7, "step_time_ms": 150}, "max_restarts": 3,
                  "termination_grace_period_seconds": 15, **(workload or {})},
        poll_interval=0.2, retries=2, fault_plan=faults, **operator)
