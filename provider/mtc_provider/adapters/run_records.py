"""A run's attempt history, kept in the bucket beside its checkpoints where no teardown deletes it (I/O only).

The run lock (adapters.run_lock) holds the attempt records while the run goes on, and is deleted with the run;
the teardown deletes the JobSets. So the launch operator also writes the records to
`<base_output_directory>/<run_name>/mtc-attempts.json` (the directory that holds `checkpoints/`), through the same
store that lists the checkpoints: GCS through GCSHook, a local target's bucket folder through that home's local
GCS, any other local directory as a file. `mtc status` and `mtc list` read it after the run ended.

What a record holds and how a run is summarized is the core's (core.attempt.run_summary).
"""

from __future__ import annotations

import json
import os
from typing import Any

from mtc_provider.adapters.checkpoint_stores import GcsCheckpointStore, local_path, open_store, split_gcs_uri
from mtc_provider.core.attempt.run_summary import RECORD_FILE, record_path

TIMEOUT = 60.0  # seconds for one request


class RunRecords:
    """Read and write `mtc-attempts.json` records, and find every run's record under a base directory."""

    def __init__(self, where: str, gcp_conn_id: str = "google_cloud_default",
                 impersonation_chain: str | list[str] | None = None, store: Any = None) -> None:
        self.store = store if store is not None else open_store(where, gcp_conn_id, impersonation_chain)

    # --- the GCS side (GCS itself, or a local target's bucket through its local GCS) ---------------------------
    # A store over a folder that a GCS server serves (the local target's bucket) offers its GCS view:
    # `gcs_view()`, `to_gcs_uri(path)`, `from_gcs_uri(uri)`; the provider knows no rehearsal class.
    def _gcs(self) -> GcsCheckpointStore | None:
        if isinstance(self.store, GcsCheckpointStore):
            return self.store
        view = getattr(self.store, "gcs_view", None)
        return view() if view is not None else None

    def _uri(self, path: str) -> str:
        return self.store.to_gcs_uri(path) if hasattr(self.store, "to_gcs_uri") else path

    def _path(self, uri: str) -> str:
        return self.store.from_gcs_uri(uri) if hasattr(self.store, "from_gcs_uri") else uri

    def write(self, checkpoint_dir: str, record: dict[str, Any]) -> str:
        """Write the run's record (replacing the previous one); returns where it went."""
        path = record_path(checkpoint_dir)
        text = json.dumps(record, indent=1, sort_keys=True)
        gcs = self._gcs()
        if gcs is None:
            target = local_path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            temporary = target.with_name(f".{target.name}.{os.getpid()}")
            temporary.write_text(text, encoding="utf-8")
            os.replace(temporary, target)  # readers never see half a record
            return path
        bucket, name = split_gcs_uri(self._uri(path))
        gcs.hook.get_conn().bucket(bucket).blob(name).upload_from_string(
            text, content_type="application/json", retry=None, timeout=TIMEOUT)
        return path

    def read(self, checkpoint_dir: str) -> dict[str, Any] | None:
        """The run's record, or None when it has none (an older provider version, a run never launched)."""
        return self._read(record_path(checkpoint_dir))

    def _read(self, path: str) -> dict[str, Any] | None:
        gcs = self._gcs()
        if gcs is None:
            try:
                text = local_path(path).read_text(encoding="utf-8")
            except FileNotFoundError:
                return None
        else:
            from google.api_core.exceptions import NotFound

            bucket, name = split_gcs_uri(self._uri(path))
            try:
                text = gcs.hook.get_conn().bucket(bucket).blob(name).download_as_text(retry=None, timeout=TIMEOUT)
            except NotFound:
                return None
        try:
            data = json.loads(text)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def runs(self, base: str) -> list[dict[str, Any]]:
        """The records of every run under `base` (`<base>/<run_name>/mtc-attempts.json`), by run name."""
        gcs = self._gcs()
        if gcs is None:
            root = local_path(base)
            paths = sorted(str(p) for p in root.glob(f"*/{RECORD_FILE}")) if root.is_dir() else []
        else:
            bucket, prefix = split_gcs_uri(self._uri(base.rstrip("/")))
            prefix = f"{prefix}/" if prefix else ""
            blobs = gcs.hook.get_conn().list_blobs(bucket, prefix=prefix, match_glob=f"{prefix}*/{RECORD_FILE}",
                                                   retry=None, timeout=TIMEOUT)
            paths = sorted(self._path(f"gs://{bucket}/{blob.name}") for blob in blobs)
        found = [self._read(path) for path in paths]
        return [record for record in found if record is not None]


def record_run(checkpoint_dir: str, gcp_conn_id: str, impersonation_chain: str | list[str] | None, *, run_name: str,
               namespace: str, target_step: int | None, state: str, attempts: Any, owner: Any, reason: str,
               progress: Any = None, ledger: Any = None) -> str:
    """Write the run's record (core.attempt.run_summary.run_record over the one already there); returns where it went. The
    launch operator's end of an attempt and the trigger's end of a retry both write through here. `ledger`: the run's
    ledger as the run lock holds it (core.attempt.ledger), merged into the one the record kept (a run lock taken
    fresh by a later try holds only that try's facts)."""
    import time

    from mtc_provider.core.attempt.run_summary import run_record

    records = RunRecords(checkpoint_dir, gcp_conn_id, impersonation_chain)
    previous = records.read(checkpoint_dir)
    data = run_record(run_name=run_name, namespace=namespace, checkpoint_dir=checkpoint_dir, target_step=target_step,
                      state=state, attempts=attempts, owner=owner, now=time.time(), reason=reason, progress=progress,
                      previous=previous)
    kept = (previous or {}).get("ledger") if (previous or {}).get("dag_run") == data["dag_run"] else None
    if ledger or kept:
        data["ledger"] = _merged_ledger(kept, ledger)
    return records.write(checkpoint_dir, data)


def _merged_ledger(kept: Any, seen: Any) -> dict[str, Any]:
    """The record's ledger and the lock's as one; a kept one that does not read is replaced."""
    from mtc_provider.core.attempt.ledger import RunLedger
    from mtc_provider.core.basics.errors import SpecError

    try:
        base = RunLedger.from_dict(kept or {})
    except SpecError:
        base = RunLedger()
    return base.merge(RunLedger.from_dict(seen or {})).to_dict()


def checkpoint_dir_of_run(base: str, run_name: str) -> str:
    """`<base>/<run_name>/checkpoints`, as CheckpointingSpec.checkpoint_directory builds it."""
    return f"{base.rstrip('/')}/{run_name}/checkpoints"


__all__ = ["RunRecords", "checkpoint_dir_of_run", "record_run"]
