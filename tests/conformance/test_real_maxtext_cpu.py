"""Real MaxText 0.2.5 trains a tiny model on the CPU as a pod of the local target; we sense what it writes.

The JobSet is rendered from a run description like any other (current layout, persistent-only mode), with
the trainer's interpreter from the MaxText environment (scripts/maxtext_env.py, list `0.2.5-train`) and a
tiny model on synthetic data. It runs as ONE pod: MaxText 0.2.5's CPU start-up (`initialize_jax_for_cpu`)
joins a coordinator on the fixed port 1234, which a shared machine cannot promise, so the run uses
`skip_jax_distributed_system=True` and the rendered 2-slice JobSet is cut to one replica.

Checked: the step folders, commit markers, `_CHECKPOINT_METADATA` and `items` folders MaxText writes; the
checkpoint sensor and its progress XCom; the goodput report on the commit times. MaxText numbers steps from 0
and its last checkpoint is `steps - 1`, asserted exactly (docs/maxtext.md, known limits).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import maxtext_env
import pytest
from tests.support.local_cluster import api, home, terminal  # noqa: F401  (fixtures)

from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore
from mtc_provider.core.jobset import build_jobset_for_run, pod_template
from mtc_provider.core.spec import RunConfig
from mtc_provider.operators.goodput import GoodputReportOperator
from mtc_provider.sensors.checkpoint import CheckpointProgressSensor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # a cold build downloads ~1.7 GB

STEPS, PERIOD = 6, 2
TINY_MODEL = {"dataset_type": "synthetic", "hardware": "cpu", "skip_jax_distributed_system": True,
              "base_emb_dim": 64, "base_num_query_heads": 2, "base_num_kv_heads": 2, "base_mlp_dim": 128,
              "base_num_decoder_layers": 2, "head_dim": 32, "per_device_batch_size": 1, "max_target_length": 32,
              "vocab_size": 128, "enable_goodput_recording": False, "monitor_goodput": False}


@pytest.fixture(scope="module")
def trainer_python() -> Path:
    try:
        return maxtext_env.ensure_env("0.2.5-train")
    except maxtext_env.EnvironmentBuildError as err:
        pytest.fail(f"could not build the MaxText 0.2.5 training environment (scripts/maxtext_env.py): {err}")


def test_real_maxtext_run_is_sensed(api, tmp_path, trainer_python):  # noqa: F811
    bucket = tmp_path / "bucket"
    config = RunConfig.from_dict({
        "target": "local",
        "slices": {"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        "checkpointing": {"run_name": "tiny-cpu", "base_output_directory": str(bucket), "steps": STEPS,
                          "checkpoint_period": PERIOD},
        "workload": {"jobset_name": "tiny-cpu", "max_restarts": 0, "env": {"JAX_PLATFORMS": "cpu"},
                     "command": [str(trainer_python), "-m", "maxtext.trainers.pre_train.train",
                                 "src/maxtext/configs/base.yml"],
                     "extra_flags": TINY_MODEL},
    })
    body = build_jobset_for_run(config)
    assert pod_template(body)["spec"]["containers"][0]["command"][2:] == [
        "maxtext.trainers.pre_train.train", "src/maxtext/configs/base.yml"]
    body["spec"]["replicatedJobs"][0]["replicas"] = 1  # one process: see the module docstring
    started = time.time()
    api.create("default", body)
    done = terminal(api, "default", "tiny-cpu", timeout=780)
    ended = time.time()
    logs = "\n".join(p.read_text() for p in sorted(api.log_dir("default", "tiny-cpu").glob("*/*.log")))
    assert done["status"]["terminalState"] == "Completed", logs[-4000:]
    assert f"completed step: {STEPS - 1}," in logs and f"completed step: {STEPS}," not in logs

    checkpoints = config.checkpointing.checkpoint_directory
    assert checkpoints == f"{bucket}/tiny-cpu/checkpoints"
    store = LocalCheckpointStore()
    found = store.finalized(checkpoints)
    # MaxText saves step 0, every checkpoint_period, and the last step (steps - 1).
    assert [info.step for info in found] == [0, 2, 4, 5]
    for info in found:
        assert store.item_path(info.path) == f"{info.path}/items"
        metadata = json.loads((Path(info.path) / "_CHECKPOINT_METADATA").read_text())
        assert list(metadata["item_handlers"]) == ["items"] and metadata["commit_timestamp_nsecs"] > 0

    sensor = CheckpointProgressSensor(task_id="progress", checkpoint_dir=checkpoints, target_step=STEPS - 1,
                                      stall_timeout=600, poll_interval=1, deferrable=False)
    sensor._validate()
    result = sensor.poke({})
    assert result.is_done and result.xcom_value["latest_step"] == STEPS - 1
    assert result.xcom_value["checkpoint_dir"] == checkpoints
    # The sample DAG's target is `steps`: MaxText never writes that step (known limit).
    waiting = CheckpointProgressSensor(task_id="progress", checkpoint_dir=checkpoints, target_step=STEPS,
                                       stall_timeout=600, poll_interval=1, deferrable=False)
    waiting._validate()
    assert waiting.poke({}) is False

    report = GoodputReportOperator(
        task_id="goodput", checkpoint_dir=checkpoints, chart_path=str(tmp_path / "goodput.png"),
        attempts=[{"start": started, "end": ended, "outcome": "finished"}],
    ).execute({"run_id": "real-maxtext"})
    assert report["source"] == "checkpoint commit times"
    assert 0 < report["goodput"] <= 1 and report["disruptions"] == 0
    assert (tmp_path / "goodput.png").stat().st_size > 0
