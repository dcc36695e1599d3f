"""Real MaxText 0.2.5 trains a tiny model on the CPU as a pod of the local target; we sense what it writes.

The JobSet is rendered from a run description like any other (current layout, persistent-only mode), with
the trainer's interpreter from the MaxText environment (scripts/maxtext_env.py, list `0.2.5-train`) and a
tiny model on synthetic data. It runs as ONE pod: MaxText 0.2.5's CPU start-up (`initialize_jax_for_cpu`)
joins a coordinator on the fixed port 1234, which a shared machine cannot promise, so the run uses
`skip_jax_distributed_system=True` and the rendered 2-slice JobSet is cut to one replica.

Checked: the step folders, commit markers, `_CHECKPOINT_METADATA` and `items` folders MaxText writes; the
checkpoint sensor and its progress XCom; the goodput report on the commit times. MaxText numbers steps from 0
and its last checkpoint is `steps - 1`, asserted exactly (docs/maxtext.md, known limits).

The progress signal is checked against MaxText's own output (issue 32): its `completed step: N` lines read by our
parser (core.measure.step_log) give every step in order with its seconds and loss, and the last one is the newest
checkpoint's step (a step from the log and a checkpoint step compare directly: core.measure.progress counts a step once);
a second run of the same run name restores (`restoring from this run's directory step N`) and reports from N + 1
on, which the signal counts as progress after a new start of the pods.

SIGTERM (a preemption or maintenance, as the kubelet stops a pod): MaxText saves and exits 0 only through JAX's
preemption service, which exists only with `jax.distributed` initialized. With `skip_jax_distributed_system` a
SIGTERM kills MaxText 0.2.5 at once, without a save (seen here: exit by signal 15 after `completed step: 3`, only
step 0 on disk; Orbax's `multihost.reached_preemption` treats JAX's RuntimeError "preemption service disabled" as
no preemption). So the SIGTERM test runs MaxText's own CPU start-up (`initialize_jax_for_cpu`) as one process of
one, with the variables XPK sets for CPU workloads (`JAX_COORDINATOR_ADDRESS`, `PROCESSES_IN_JOB`,
`JAX_PROCESS_COUNT`; the runner sets `JOB_INDEX` and `JOB_COMPLETION_INDEX`): its coordinator takes the fixed
port 1234 on this machine (bound to the loopback through `JAX_COORDINATOR_BIND_ADDRESS`), which the test checks
is free first.

Emergency checkpointing with two processes, a kill and a restore from the local tier, is not run with real
MaxText: MaxText 0.2.5's emergency manager needs `jax-init-info.txt` from the MTC driver only on TPUs
(`initialize_jax_for_tpu_with_emergency_checkpointing`); on the CPU it starts through `initialize_jax_for_cpu`,
whose coordinator port is fixed (1234), so two runs of this suite on one machine collide, and its replicas are
slices (Orbax's `multislice.slice_count()` counts the devices' `slice_index`, which CPU devices do not have: one
slice, no peer to restore from). The local workload (Orbax's emergency
manager itself, tests/acceptance) is what rehearses that path (docs/maxtext.md, known limits).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest
from tests.support.local_cluster import api, home, terminal  # noqa: F401  (fixtures)

from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore
from mtc_provider.core.definition.render.jobset_manifest import build_jobset_for_run, pod_template
from mtc_provider.core.measure.progress import PERSISTENT, REPORTED_LOG, ProgressSignal
from mtc_provider.core.measure.step_log import latest_step_line, parse_step_line
from mtc_provider.core.definition.description.spec import RunConfig
from mtc_provider.operators.goodput import GoodputReportOperator
from mtc_provider.sensors.checkpoint import CheckpointProgressSensor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # a cold build downloads ~1.7 GB

STEPS, PERIOD = 6, 2
TINY_MODEL = {"dataset_type": "synthetic", "hardware": "cpu", "skip_jax_distributed_system": True,
              "base_emb_dim": 64, "base_num_query_heads": 2, "base_num_kv_heads": 2, "base_mlp_dim": 128,
              "base_num_decoder_layers": 2, "head_dim": 32, "per_device_batch_size": 1, "max_target_length": 32,
              "vocab_size": 128, "enable_goodput_recording": False, "monitor_goodput": False}


@pytest.fixture(scope="module")
def trainer_python(maxtext_python) -> Path:
    """The session's MaxText 0.2.5 environment (conftest.maxtext_python: the trainer's list)."""
    return maxtext_python


def _config(bucket: Path, trainer_python: Path, jobset: str, steps: int, period: int = PERIOD,
            env: dict | None = None, checkpointing: dict | None = None, workload: dict | None = None,
            **flags) -> RunConfig:
    return RunConfig.from_dict({
        "target": "local",
        "slices": {"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        "checkpointing": {"run_name": "tiny-cpu", "base_output_directory": str(bucket), "steps": steps,
                          "checkpoint_period": period, **(checkpointing or {})},
        "workload": {"jobset_name": jobset, "max_restarts": 0, "env": {"JAX_PLATFORMS": "cpu", **(env or {})},
                     "command": [str(trainer_python), "-m", "maxtext.trainers.pre_train.train",
                                 "src/maxtext/configs/base.yml"],
                     "extra_flags": {**TINY_MODEL, **flags}, **(workload or {})},
    })


def _run_one_process(api, config: RunConfig, timeout: float) -> tuple[dict, str]:  # noqa: F811
    """The rendered JobSet cut to one replica (see the module docstring), run to its end; (JobSet, pod logs)."""
    body = build_jobset_for_run(config)
    body["spec"]["replicatedJobs"][0]["replicas"] = 1
    name = config.workload.jobset_name
    api.create("default", body)
    done = terminal(api, "default", name, timeout=timeout)
    return done, "\n".join(p.read_text() for p in sorted(api.log_dir("default", name).glob("*/*.log")))


def _step_lines(logs: str) -> list:
    return [parsed for parsed in map(parse_step_line, logs.splitlines()) if parsed is not None]


def test_real_maxtext_run_is_sensed(api, tmp_path, trainer_python):  # noqa: F811
    bucket = tmp_path / "bucket"
    config = _config(bucket, trainer_python, "tiny-cpu", STEPS)
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
    # Our parser on MaxText's own lines: every step in order, each with its seconds and loss.
    reported = _step_lines(logs)
    assert [line.step for line in reported] == list(range(STEPS)), logs[-3000:]
    assert all(line.seconds is not None and line.seconds >= 0 and line.loss is not None for line in reported)

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

    # The newest reported step is the newest checkpoint's: the two sources compare directly, so the signal counts
    # the checkpoint of step 5 as no news after the log showed step 5 (core.measure.progress.ProgressSignal).
    assert latest_step_line(logs.splitlines()).step == found[-1].step == STEPS - 1

    report = GoodputReportOperator(
        task_id="goodput", checkpoint_dir=checkpoints, chart_path=str(tmp_path / "goodput.png"),
        attempts=[{"start": started, "end": ended, "outcome": "finished"}],
    ).execute({"run_id": "real-maxtext"})
    assert report["source"] == "checkpoint commit times"
    assert 0 < report["goodput"] <= 1 and report["disruptions"] == 0
    assert (tmp_path / "goodput.png").stat().st_size > 0

    # A second run of the same run name (a new attempt's pods, the restart of layer 2): MaxText restores the
    # newest checkpoint and reports from the next step on; the signal, after a new start of the pods, counts those
    # steps as progress although they are below no step of their own source any more.
    more = STEPS + 3
    resumed, logs2 = _run_one_process(api, _config(bucket, trainer_python, "tiny-cpu-2", more), timeout=780)
    assert resumed["status"]["terminalState"] == "Completed", logs2[-4000:]
    assert f"restoring from this run's directory step {STEPS - 1}" in logs2, logs2[-4000:]
    assert [line.step for line in _step_lines(logs2)] == list(range(STEPS, more)), logs2[-3000:]
    signal = ProgressSignal(started_at=0.0)
    for at, line in enumerate(reported):
        signal.observe(line.step, REPORTED_LOG, float(at))
    signal.observe(found[-1].step, PERSISTENT, float(len(reported)))
    signal.new_start()
    first = _step_lines(logs2)[0]
    assert signal.observe(first.step, REPORTED_LOG, 100.0) and signal.seconds_without_progress(100.0) == 0.0
    assert signal.alive.step == STEPS and signal.restorable.step == STEPS - 1


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_real_maxtext_saves_and_exits_0_on_sigterm(api, tmp_path, trainer_python):  # noqa: F811
    """What the signal's "graceful interruption" relies on (core.attempt.interruptions: the JobSet completes below its
    target): SIGTERM makes MaxText save at JAX's preemption sync point and exit 0, with autocheckpoint."""
    from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore as Store
    from mtc_provider.core.attempt.resubmission import RETRY, decide
    from mtc_provider.core.attempt.status import evaluate_jobset

    assert _port_free(1234), ("MaxText 0.2.5's CPU start-up binds the JAX coordinator on the fixed port 1234 "
                              "(maxtext/utils/max_utils.py initialize_jax_for_cpu), which something else holds here")
    bucket, steps = tmp_path / "bucket", 2000
    config = _config(bucket, trainer_python, "tiny-term", steps, period=10_000,
                     # JAX's coordinator binds every interface unless told (jax/_src/distributed.py): the loopback
                     env={"JAX_COORDINATOR_ADDRESS": "127.0.0.1", "JAX_COORDINATOR_BIND_ADDRESS": "127.0.0.1:1234",
                          "PROCESSES_IN_JOB": "1", "JAX_PROCESS_COUNT": "1"},
                     checkpointing={"enable_autocheckpoint": True}, skip_jax_distributed_system=False)
    body = build_jobset_for_run(config)
    body["spec"]["replicatedJobs"][0]["replicas"] = 1
    api.create("default", body)
    deadline, logs = time.monotonic() + 780, ""
    while "completed step: 3," not in logs:
        assert time.monotonic() < deadline, f"no `completed step: 3` within 780 s:\n{logs[-3000:]}"
        time.sleep(0.5)
        logs = "\n".join(p.read_text() for p in sorted(api.log_dir("default", "tiny-term").glob("*/*.log")))
    (pod,) = api.pods("default", "tiny-term")
    os.kill(int(pod["pid"]), signal.SIGTERM)  # what the kubelet sends a pod's process when it stops it
    done = terminal(api, "default", "tiny-term", timeout=300)
    logs = "\n".join(p.read_text() for p in sorted(api.log_dir("default", "tiny-term").glob("*/*.log")))
    assert done["status"]["terminalState"] == "Completed", logs[-4000:]  # exit 0: the Job completed
    assert "SIGTERM caught" in logs and "due to preemption" in logs, logs[-4000:]
    assert "Training stopped: Job received termination signal (SIGTERM)." in logs
    reported = latest_step_line(logs.splitlines()).step
    saved = Store().finalized(config.checkpointing.checkpoint_directory)[-1].step
    # The preemption save is at JAX's sync step: at or after the last step the log reported (seen: 18 after 17),
    # well below the target, so the end is a graceful interruption, resumed from that save.
    assert reported <= saved < steps - 1, (reported, saved)
    decision = decide(evaluate_jobset(done), saved, steps - 1, [None], 2)
    assert decision.kind == RETRY and "completed below target" in decision.reason, decision



@pytest.mark.soak  # 40-90 s of real MaxText for a non-default option: `make soak`
def test_real_maxtext_under_the_wrapper_restarts_in_the_cluster_after_a_graceful_preemption(
        api, tmp_path, trainer_python):  # noqa: F811
    """`workload.graceful_preemption: in_cluster` with real MaxText (core.definition.render.graceful_exit): the
    runner's `sigterm_slice` marks the pod DisruptionTarget and SIGTERMs it, as a graceful node shutdown does;
    MaxText saves at JAX's preemption sync point and exits 0, the wrapper exits 143 (SIGTERM below the last step),
    the pod fails, podFailurePolicy rule 0 and `RestartOnDisruption` restart the JobSet without counting
    (`max_restarts` 0), and the restarted MaxText restores the preemption's save and trains to its last step.
    Seen (2026-12-06, 89 s with two MaxText start-ups): SIGTERM at step 78, the save of step 79, exit 143, the restart
    restoring step 79."""
    from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore as Store
    from mtc_local.runner.manifest import FAULT_PLAN_ANNOTATION

    assert _port_free(1234), "MaxText 0.2.5's CPU start-up binds the JAX coordinator on the fixed port 1234"
    bucket, steps = tmp_path / "bucket", 2000  # a step takes ~5 ms: enough of them for the fault to come first
    config = _config(bucket, trainer_python, "tiny-wrap", steps, period=10_000,
                     env={"JAX_COORDINATOR_ADDRESS": "127.0.0.1", "JAX_COORDINATOR_BIND_ADDRESS": "127.0.0.1:1234",
                          "PROCESSES_IN_JOB": "1", "JAX_PROCESS_COUNT": "1"},
                     checkpointing={"enable_autocheckpoint": True}, workload={"graceful_preemption": "in_cluster"},
                     skip_jax_distributed_system=False)
    body = build_jobset_for_run(config)
    container = pod_template(body)["spec"]["containers"][0]
    assert container["command"][:2] == ["python3", "-c"] and container["command"][3] == str(steps - 1)
    body["spec"]["replicatedJobs"][0]["replicas"] = 1
    body["metadata"].setdefault("annotations", {})[FAULT_PLAN_ANNOTATION] = json.dumps(
        [{"kind": "sigterm_slice", "at_step": 3, "slice": 0}])
    api.create("default", body)
    done = terminal(api, "default", "tiny-wrap", timeout=1200)
    logs = "\n".join(p.read_text() for p in sorted(api.log_dir("default", "tiny-wrap").glob("*/*.log")))
    assert done["status"]["terminalState"] == "Completed", logs[-4000:]
    fired = api.run_faults("default", "tiny-cpu")
    assert done["status"]["restarts"] == 1 and done["status"]["restartsCountTowardsMax"] == 0, (
        done["status"], fired, logs[-6000:])
    assert "Training stopped: Job received termination signal (SIGTERM)." in logs, logs[-4000:]
    assert "mtc: stopped by SIGTERM at step" in logs and "restart in the cluster" in logs, logs[-4000:]
    restored = [line for line in logs.splitlines() if "restoring from this run's directory step" in line]
    assert restored, logs[-4000:]
    assert Store().finalized(config.checkpointing.checkpoint_directory)[-1].step == steps - 1
