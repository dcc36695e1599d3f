"""End to end: the runner runs the real JAX/Orbax workload as a 2-slice JobSet (slow: JAX start-up)."""

from __future__ import annotations

import pytest

from mtc_local.cluster.client import LocalCluster
from tests.support.local_cluster import make_jobset, terminal

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("faults", [None, [{"kind": "sigkill_host", "at_step": 3, "slice": 1, "host": 0}]],
                         ids=["no-fault", "sigkill"])
def test_two_slice_jobset_of_the_real_workload_completes(api: LocalCluster, tmp_path, faults):
    bucket = tmp_path / "bucket"
    body = make_jobset("real", tmp_path / "unused.py", slices=2, hosts=1, grace=10, fault_plan=faults)
    container = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    container["command"] = ["python3", "-m", "mtc_local.workload"]
    container["args"] = [
        "run_name=real", f"base_output_directory={bucket}", "steps=6", "model_dim=32", "global_batch_size=8",
        "enable_emergency_checkpoint=True", "local_checkpoint_directory=/local", "local_checkpoint_period=2",
        "checkpoint_period=4", "distributed_timeout_s=60",
    ]
    api.create("default", body)
    done = terminal(api, "default", "real", timeout=240)
    logs = "\n".join(p.read_text() for p in sorted(api.log_dir("default", "real").glob("*/*.log")))
    assert done["status"]["terminalState"] == "Completed", logs[-3000:]
    assert "completed step: 6" in logs
    assert done["status"]["restarts"] == (1 if faults else 0)
    assert len(api.faults("default", "real")) == (1 if faults else 0)
    assert (bucket / "real" / "checkpoints" / "6" / "commit_success.txt").exists(), sorted(bucket.rglob("*"))[:20]
