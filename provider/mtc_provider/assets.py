"""A run's checkpoint directory as an Airflow asset, with a watcher that records each new persistent
checkpoint as an asset event as it happens.

Task outlets are recorded only when a task finishes, so a training task could announce checkpoints only at
its end. Instead the asset carries an AssetWatcher whose trigger (CheckpointAssetTrigger, a BaseEventTrigger)
runs in the triggerer; each event it yields becomes an asset event at once, with extra
`{"from_trigger": True, "payload": {"step", "commit_time", "run_name", "checkpoint_dir", "path"}}`.
A downstream DAG scheduled on the asset runs once per new checkpoint (e.g. an evaluation).
"""

from __future__ import annotations

from typing import Any, Mapping

from airflow.sdk import Asset, AssetWatcher

from mtc_provider.adapters.checkpoint_stores import local_path, split_gcs_uri
from mtc_provider.triggers.checkpoint import CheckpointAssetEvent, CheckpointAssetTrigger


def checkpoint_uri(checkpoint_dir: str) -> str:
    """The asset URI of a checkpoint directory: gs://bucket/path, or file:///abs/path for a local one."""
    if checkpoint_dir.startswith("gs://"):
        bucket, path = split_gcs_uri(checkpoint_dir)
        return f"gs://{bucket}/{path}".rstrip("/")
    return f"file://{local_path(checkpoint_dir).as_posix().rstrip('/')}"


def checkpoint_asset(checkpoint_dir: str, run_name: str, *, name: str | None = None, watch: bool = True,
                     poll_interval: float = 60.0, gcp_conn_id: str = "google_cloud_default") -> Asset:
    """The asset for a run's persistent checkpoints; with `watch`, the watcher that emits an event per new step.

    Use the same call in the DAG that consumes it (`schedule=[checkpoint_asset(...)]`).
    """
    asset_name = name or f"mtc-checkpoints-{run_name}"
    watchers = []
    if watch:
        trigger = CheckpointAssetTrigger(checkpoint_dir=checkpoint_dir, run_name=run_name,
                                         poll_interval=poll_interval, gcp_conn_id=gcp_conn_id)
        watchers.append(AssetWatcher(name=f"{asset_name}-watcher", trigger=trigger))
    return Asset(name=asset_name, uri=checkpoint_uri(checkpoint_dir), group="checkpoint",
                 extra={"run_name": run_name}, watchers=watchers)


def checkpoint_from_event(asset_event: Any) -> CheckpointAssetEvent:
    """The checkpoint an asset event announces; accepts an AssetEvent-like object or its `extra` dict."""
    extra: Mapping[str, Any] = asset_event if isinstance(asset_event, Mapping) else asset_event.extra
    return CheckpointAssetEvent.from_payload(extra.get("payload", extra))
