"""Multi-tier mode end to end on the local target, through the launch operator (synchronous tries): the workload
(`mtc_local.light_workload` in multi-tier mode) saves only its local tier, as MaxText does in that mode, and never a
persistent checkpoint; the runner's replicator (`mtc_local.runner.replicator`) backs the ramdisks up to the run's
bucket folder in GKE MTC's layout (`<bucket>/<run_name>/<time>/<job>-s<step>-n<node>-w<worker>.meta`, listed by the
provider through the local GCS); a host's ramdisk is wiped and the host killed (`wipe_ramdisk`); at the restart MTC's
restore fills the ramdisks from the newest complete backup, the workload logs the step it restored, and the run
reaches its target with the fault-free final parameters.

The light workload (no JAX: a few bytes per checkpoint) is the only local workload with a multi-tier mode: the
JAX one refuses the flag (core.definition.render.maxtext.check_target_mode; docs/maxtext.md "Multi-tier mode: the local replicator").
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mtc_local.cluster.client import LocalCluster
from mtc_provider.adapters.workload_events import events_dir, read_events
from mtc_provider.core.measure.listing import backup_steps
from mtc_provider.operators.jobset import MtcJobSetOperator
from tests.support.js_helpers import FakeTI

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

STEPS = 40
LOCAL_PERIOD = 2
BACKUP_STEPS = 6
WIPE_AT = 23  # after the backups of 2, 8, 14 and 20 (every 6 steps from the first common local save)
FLAGS = {"seed": 11, "step_time_ms": 150}
STALL_TIMEOUT = 60


def _operator(home, run_name: str, fault_plan=None) -> MtcJobSetOperator:
    return MtcJobSetOperator(
        task_id="train", target={"kind": "local", "home": str(home)},
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": run_name, "base_output_directory": str(Path(home) / "buckets" / "mtc-mt"),
                       "steps": STEPS, "enable_emergency_checkpoint": False,
                       "enable_multi_tier_checkpointing": True, "local_checkpoint_directory": "/local",
                       "local_checkpoint_period": LOCAL_PERIOD,
                       "multi_tier_checkpointing_backup_interval_steps": BACKUP_STEPS},
        workload={"jobset_name": run_name, "image": "local", "command": ["python3", "-m", "mtc_local.light_workload"],
                  "extra_flags": FLAGS, "max_restarts": 3, "termination_grace_period_seconds": 15},
        # A stall watch on (STALL_TIMEOUT): the trigger lists the replicator's backups as progress and as the
        # restorable step, as there is never a persistent checkpoint.
        deferrable=False, poll_interval=0.2, retries=1, crash_loop_attempts=2, fault_plan=fault_plan,
        stall_timeout=STALL_TIMEOUT)


def _events(home, run_name: str) -> list[dict]:
    return read_events(events_dir(str(Path(home) / "buckets" / "mtc-mt"), run_name))



def test_multi_tier_run_restores_a_wiped_host_from_the_replicators_backup_and_reaches_its_target(home, capfd):
    started = time.monotonic()
    reference = _operator(home, "mtref").execute({"ti": FakeTI(run_id="mtref")})
    reference_wall = time.monotonic() - started
    assert reference["last_step"] == STEPS

    started = time.monotonic()
    ti = FakeTI(run_id="mt", max_tries=1)
    fault = {"kind": "wipe_ramdisk", "at_step": WIPE_AT, "slice": 1, "host": 0}
    result = _operator(home, "mt", [fault]).execute({"ti": ti})  # one try: it must not raise
    wall = time.monotonic() - started
    summary = (f"{wall:.0f}s (fault-free {reference_wall:.0f}s), attempts "
               f"{[(a['attempt'], a['outcome'], a['restarts']) for a in ti.xcoms['attempts']]}")

    output = "".join(capfd.readouterr())
    seen = [int(line.split("new MTC replicator backup: step ")[1].split()[0]) for line in output.splitlines()
            if "new MTC replicator backup: step " in line]
    assert seen and "stalled" not in output, summary  # the trigger saw the backups as progress, no stall verdict
    bucket = Path(home) / "buckets" / "mtc-mt"
    assert not list(bucket.rglob("commit_success.txt")), "multi-tier mode wrote a persistent checkpoint"
    metas = [p.relative_to(bucket).as_posix() for p in bucket.rglob("*.meta")]
    assert all(name.startswith("mt/") or name.startswith("mtref/") for name in metas), metas
    steps = backup_steps([m for m in metas if m.startswith("mt/")], workers=2)
    assert result["last_step"] == STEPS and STEPS in steps, (steps, summary)
    fired = LocalCluster(str(home)).run_faults("default", "mt")
    assert len(fired) == 1, "the wipe never fired"
    # What MTC restores: the newest step every node had backed up when the host was lost (backups every
    # BACKUP_STEPS steps from the first local save; the runner backs up before it fires faults in one tick).
    restored = max(s for s in steps if s <= fired[0]["step"])
    assert fired[0]["step"] - restored <= BACKUP_STEPS + LOCAL_PERIOD, (fired, steps)

    events = _events(home, "mt")
    restores = [e for e in events if e["event"] == "restore"]
    assert {(e["step"], e["tier"]) for e in restores} == {(restored, "local")}, (restores, steps, summary)
    assert len(restores) == 2  # both hosts resumed from the replicator's backup, the wiped one included
    logs = [p.read_text() for p in (Path(home).rglob("s1-h0.log"))]
    assert any(f"restored step {restored} from tier local" in text for text in logs), summary
    finish = [e for e in events if e["event"] == "finish"][-1]
    reference_finish = [e for e in _events(home, "mtref") if e["event"] == "finish"][-1]
    assert finish["params_sha256"] == reference_finish["params_sha256"], summary
    progress = json.dumps({k: v for k, v in ti.xcoms.items() if k != "attempts"}, default=str)
    assert set(seen) <= set(steps) | set(backup_steps([m for m in metas if m.startswith("mtref/")], workers=2))
    print(f"multi-tier run with a wiped host: {summary}; backups seen by the trigger {sorted(set(seen))}; "
          f"xcoms {progress[:300]}")
