"""A listing outage from the fault plan, on the local target with real processes, through the launch operator.

The local GCS answers a failing `objects.list` as GCS documents its errors
(https://cloud.google.com/storage/docs/json_api/v1/status-codes: 503 Service Unavailable, "retry with exponential
backoff"); the checkpoint sensing lists the bucket through it with the same GCSHook code as on GCP. A healthy run
whose listings fail for longer than stall_timeout is not a stall: the stall clock is paused while listing fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtc_provider.operators.jobset import MtcJobSetOperator

pytestmark = pytest.mark.timeout(180)

STEPS = 60  # 24 s of steps: the 6 s outage ends long before the run does, even on a loaded machine
# Commits a checkpoint in the emergency layout every step (commit_success.txt last, as Orbax finalizes) and says
# so in the log, where the runner reads `completed step: N` to fire step faults.
WORKLOAD = """import os, pathlib, time
root = pathlib.Path({directory!r})
writer = os.environ.get("MTC_PROCESS_ID") == "0"  # the runner's downward-API identity: one process writes
for step in range(1, {steps} + 1):
    time.sleep(0.4)
    for name in () if not writer else ("default/d/0", "_CHECKPOINT_METADATA", "commit_success.txt"):
        path = root / str(step) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    print(f"completed step: {{step}}", flush=True)
"""


class TI:
    dag_id, run_id, task_id, try_number = "d", "r", "train", 1

    def xcom_push(self, key, value) -> None:
        pass



def test_a_listing_outage_longer_than_stall_timeout_does_not_stall_a_healthy_run(tmp_path, home, capsys):
    """At step 3 the home's listings answer 503 for 6 s (stall_timeout 2 s): the run goes on to its target."""
    base = Path(home) / "buckets" / "mtc-checkpoints"
    script = tmp_path / "workload.py"
    script.write_text(WORKLOAD.format(directory=str(base / "r1" / "checkpoints"), steps=STEPS))
    op = MtcJobSetOperator(
        task_id="train", target={"kind": "local", "home": str(home)},
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": "r1", "base_output_directory": str(base), "steps": STEPS},
        workload={"jobset_name": "r1", "image": "local", "command": ["python3", str(script)], "max_restarts": 0},
        deferrable=False, poll_interval=0.2, stall_timeout=2, listing_timeout=60,
        fault_plan=[{"kind": "listing_outage", "at_step": 3, "seconds": 6, "status": 503}])
    op.execute({"ti": TI()})
    out = capsys.readouterr().out
    assert "503" in out and "the stall clock is paused while listing fails" in out, out[-3000:]
    # ("works again" is an INFO line: whether INFO reaches stdout depends on earlier tests' logging set-up.)
    (jobset_faults,) = [p for p in (Path(home) / "faults" / "default").glob("*.jsonl") if not p.name.startswith("run-")]
    fired = [json.loads(line) for line in jobset_faults.read_text().splitlines()]
    assert [(f["kind"], f["status"], f["seconds"]) for f in fired] == [("listing_outage", 503, 6.0)]
