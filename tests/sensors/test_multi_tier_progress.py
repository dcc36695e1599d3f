"""The checkpoint-progress sensor in multi-tier mode, with the real storage client against the GCS emulator.

MaxText writes no persistent checkpoint in multi-tier mode; GKE MTC's replicator backs each node's local tier up
to `<bucket>/<run_name>/<YYYY-MM-DD_HH-MM>/`, a `D<hash>.data/` folder and then `<job>-s<step>-n<node>-w<worker>.meta`
per node (ml-auto-solutions `validation_util.py`; core.measure.progress.replicator_backup_dir). A new start restores a
step only once every node backed it up, so the sensor counts a backup only then (adapters.checkpoint_stores
`Newest.restorable`, as the JobSet trigger reads it), in both its poke and its deferred (trigger) path.
"""

from __future__ import annotations

import time

import pytest
from airflow.sdk.exceptions import TaskDeferred

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.measure.progress import REPLICATOR
from mtc_provider.sensors.checkpoint import CheckpointProgressSensor
from mtc_provider.triggers import checkpoint as trigger_module
from mtc_provider.triggers.checkpoint import CheckpointProgressEvent
from tests.support.checkpoint_fixtures import GCS_CONN_ID

pytestmark = pytest.mark.timeout(60)

SLICES = {"tpu_type": "v6e", "topology": "2x4", "num_slices": 2}  # 2 hosts a slice: 4 nodes
NODES = 4
FOLDER = "2026-04-01_10-00"


def checkpointing(run: str, multi_tier: bool = True) -> dict:
    mode = ({"enable_multi_tier_checkpointing": True, "multi_tier_checkpointing_backup_interval_steps": 4}
            if multi_tier else {"enable_emergency_checkpoint": True})
    return {"run_name": run, "base_output_directory": "gs://ckpt/out", "steps": 40,
            "enable_emergency_checkpoint": False, "local_checkpoint_directory": "/local", "local_checkpoint_period": 2, **mode}


def _upload(name: str, data: bytes) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    storage.Client(project="mtc-test", credentials=AnonymousCredentials()).bucket("ckpt").blob(name) \
        .upload_from_string(data)


def backup(run: str, step: int, nodes: range) -> None:
    """`nodes`' replicator backups of `step`: each node's data folder first, then the `.meta` naming it (as the
    rehearsal's replicator writes them: rehearsal/mtc_local/runner/replicator.py)."""
    for node in nodes:
        _upload(f"{run}/{FOLDER}/D{step}n{node}.data/manifest.ocdbt", b"ocdbt")
        _upload(f"{run}/{FOLDER}/{run}-s{step}-n{node}-w0.meta", b'{"data": "D%dn%d.data"}' % (step, node))


def _sensor(run: str, **kwargs) -> CheckpointProgressSensor:
    values = {"task_id": "checkpoint_progress", "checkpoint_dir": f"gs://ckpt/out/{run}/checkpoints",
              "target_step": 40, "stall_timeout": None, "poll_interval": 1, "gcp_conn_id": GCS_CONN_ID,
              "checkpointing": checkpointing(run), "slices": SLICES, "deferrable": False}
    return CheckpointProgressSensor(**{**values, **kwargs})


@pytest.mark.parametrize("partial", [1, NODES - 1])
def test_poke_counts_a_replicator_backup_only_once_every_node_has_it(gcs, partial):
    run = f"mtpoke{partial}"
    backup(run, 20, range(NODES))
    backup(run, 40, range(partial))  # the other nodes' uploads still in progress (or those nodes were lost)
    sensor = _sensor(run)
    sensor._validate()
    assert sensor.poke({}) is False  # step 40 is not restorable yet: step 20 is the newest that is
    assert sensor._progress.latest_step == 20
    backup(run, 40, range(partial, NODES))
    result = sensor.poke({})
    assert result.is_done
    assert result.xcom_value["latest_step"] == 40 and result.xcom_value["source"] == REPLICATOR


def test_without_multi_tier_mode_the_backups_are_not_read(gcs):
    """A run in the legacy emergency mode: MaxText writes persistent checkpoints, and backups are no concern."""
    backup("mtoff", 40, range(NODES))
    sensor = _sensor("mtoff", checkpointing=checkpointing("mtoff", multi_tier=False))
    sensor._validate()
    assert sensor.poke({}) is False and sensor._progress.latest_step is None


class _Clock:
    """The trigger's clock without real waiting (triggers.checkpoint.clock), from the wall clock the sensor's
    `started_at` was taken with."""

    def __init__(self) -> None:
        self.t = time.time()

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds


async def _deferred_event(sensor: CheckpointProgressSensor) -> tuple[dict, CheckpointProgressEvent]:
    """The sensor deferred as Airflow runs it: execute raises TaskDeferred, its trigger runs until its event."""
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert trigger.serialize()[1]["backup_nodes"] == NODES  # survives the trip through the triggerer's table
    async for event in trigger.run():
        return event.payload, CheckpointProgressEvent.from_payload(event.payload)
    raise AssertionError("the trigger yielded no event")


@pytest.mark.parametrize("partial", [1, NODES - 1])
async def test_deferred_a_partial_backup_never_reaches_the_target_a_complete_one_does(gcs, monkeypatch, partial):
    monkeypatch.setattr(trigger_module, "clock", _Clock())
    run = f"mtdefer{partial}"
    backup(run, 20, range(NODES))
    backup(run, 40, range(partial))
    # With a stall limit the trigger ends: no restorable progress past step 20 while step 40 is partial.
    _, stalled = await _deferred_event(_sensor(run, deferrable=True, stall_timeout=30))
    assert stalled.status == "stalled" and stalled.progress.latest_step == 20, stalled
    assert f"nor complete replicator backup in gs://ckpt/{run}" in stalled.message

    backup(run, 40, range(partial, NODES))
    sensor = _sensor(run, deferrable=True)
    payload, reached = await _deferred_event(sensor)
    assert reached.status == "reached" and reached.source == REPLICATOR, reached
    assert "backed up by the MTC replicator" in reached.message
    result = sensor.execute_complete({}, payload)
    assert result["latest_step"] == 40 and result["source"] == REPLICATOR


@pytest.mark.parametrize("slices, checkpointing, field, says", [
    # multi-tier: how many nodes a backup must cover is required, and the message says why
    (None, checkpointing("mtbad"), "slices", "in multi-tier mode, where a replicator backup counts once every node"),
    ({"tpu_type": "v6e", "topology": "9x9", "num_slices": 2}, checkpointing("mtbad"), "slices.topology", "v6e"),
    (SLICES, {**checkpointing("mtbad"), "enable_multi_tier": True}, "checkpointing", "enable_multi_tier"),
])
def test_bad_sections_are_refused_naming_the_field_before_any_listing(slices, checkpointing, field, says, monkeypatch):
    from mtc_provider.adapters import checkpoint_stores

    def no_listing(*args, **kwargs):
        raise AssertionError("listed before the sections were checked")

    monkeypatch.setattr(checkpoint_stores.GcsCheckpointStore, "_list", no_listing)
    sensor = _sensor("mtbad", slices=slices, checkpointing=checkpointing)
    with pytest.raises(SpecError) as refused:
        sensor.execute({})
    assert refused.value.field.startswith(field) and says in str(refused.value), refused.value
