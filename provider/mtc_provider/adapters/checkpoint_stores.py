"""CheckpointStore implementations: GCS through the google provider's GCSHook, and a local directory.

A directory in a local target's bucket folder (`<home>/buckets/<bucket>/...`, where the local workload writes as
through a GCS FUSE mount) is listed through that home's local GCS with the GCS store, so the local target runs
the same sensing code as GKE; any other local directory is read with scandir.

The core (`core.measure.listing`) decides what counts; these classes only fetch names. Both answer an incremental
question, `finalized(dir, after=step)`, so a poke after the first looks only at what is new where the store
allows it. The async side (`AsyncCheckpointStore`) runs the same code in a worker thread
(asyncio.to_thread) so a trigger never blocks the event loop; the hook is built there, from the connection id.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

from mtc_provider.adapters.protocols import CheckpointInfo, CheckpointStore
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.measure.listing import (COMMIT_FILE, commit_glob, complete_backups, data_complete, item_of,
                                               longer_steps_glob, newer_than, same_length_glob, start_offset_after,
                                               step_of_dir)

GCS_PAGE_SIZE = 1000  # the GCS JSON API maximum for objects.list
LISTING_TIMEOUT = 60.0  # seconds for one listing request (connect and read)
LIST_PERMISSION = "storage.objects.list"


def split_gcs_uri(uri: str) -> tuple[str, str]:
    """('bucket', 'path/without/trailing/slash') from gs://bucket/path; SpecError when it is not one."""
    parsed = urlparse(uri)
    if parsed.scheme != "gs" or not parsed.netloc:
        raise SpecError("checkpoint_dir", uri, "a gs://BUCKET/PATH URL or an absolute local path")
    return parsed.netloc, parsed.path.strip("/")


def local_path(checkpoint_dir: str) -> Path:
    path = checkpoint_dir[len("file://"):] if checkpoint_dir.startswith("file://") else checkpoint_dir
    if not path.startswith("/"):
        raise SpecError("checkpoint_dir", checkpoint_dir, "a gs://BUCKET/PATH URL or an absolute local path")
    return Path(path)


class FinalizedSteps:
    """The CheckpointStore reads every store derives from its own `finalized(checkpoint_dir, after)`."""

    def finalized(self, checkpoint_dir: str, after: int | None = None) -> list[CheckpointInfo]:
        raise NotImplementedError

    def finalized_steps(self, checkpoint_dir: str) -> list[CheckpointInfo]:
        return self.finalized(checkpoint_dir)


class LocalCheckpointStore(FinalizedSteps):
    """A local checkpoint directory (the local target's bucket). Cost: one scandir plus a stat per new step."""

    def finalized(self, checkpoint_dir: str, after: int | None = None) -> list[CheckpointInfo]:
        root = local_path(checkpoint_dir)
        try:
            entries = list(os.scandir(root))
        except FileNotFoundError:
            return []
        candidates = {step: entry.path for entry in entries
                      if entry.is_dir() and (step := step_of_dir(entry.name)) is not None}
        out = []
        for step in newer_than(candidates, after):
            try:
                commit = os.stat(os.path.join(candidates[step], COMMIT_FILE))
            except FileNotFoundError:
                continue  # uncommitted: a save in progress or one that died
            out.append(CheckpointInfo(step, candidates[step], commit.st_mtime))
        return out

    def item_path(self, step_path: str) -> str | None:
        """`<step>/<item>` for a step directory (items, default or state: core.measure.listing.ITEM_DIRS), or None."""
        try:
            item = item_of(entry.name for entry in os.scandir(local_path(step_path)) if entry.is_dir())
        except FileNotFoundError:
            return None
        return f"{step_path.rstrip('/')}/{item}" if item else None


@dataclass
class ListingCost:
    """Requests this store sent, and entries they returned: what a benchmark reports per poke."""

    requests: int = 0
    entries: int = 0

    def reset(self) -> None:
        self.requests = self.entries = 0


class GcsCheckpointStore(FinalizedSteps):
    """A gs:// checkpoint directory through GCSHook.

    One glob-filtered listing selects one object per finalized step (its commit marker), paged by 1,000, so
    the cost follows the number of steps, never the files inside them; the marker's creation time is the
    commit time, with no further request. After the first call, `after=` narrows it with startOffset to what
    is new: steps with as many digits as the last one from startOffset on, plus those with more digits.
    """

    def __init__(self, gcp_conn_id: str = "google_cloud_default", hook: Any = None,
                 impersonation_chain: str | list[str] | None = None) -> None:
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self._hook = hook
        self.cost = ListingCost()

    @property
    def hook(self) -> Any:
        if self._hook is None:
            from airflow.providers.google.cloud.hooks.gcs import GCSHook

            self._hook = GCSHook(gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain)
        return self._hook

    def _list(self, bucket: str, prefix: str, match_glob: str, start_offset: str | None = None) -> list[Any]:
        with _mapped_errors():
            return self._list_pages(bucket, prefix, match_glob, start_offset)

    def _list_pages(self, bucket: str, prefix: str, match_glob: str, start_offset: str | None) -> list[Any]:
        client = self.hook.get_conn()
        # No client-library retry: a failed listing is reported at once; the caller lists again next poll
        # (a trigger pauses its stall clock while listings fail). The timeout bounds a hung request.
        iterator = client.list_blobs(bucket, prefix=prefix, match_glob=match_glob, start_offset=start_offset,
                                     page_size=GCS_PAGE_SIZE, retry=None, timeout=LISTING_TIMEOUT)
        blobs = []
        for page in iterator.pages:
            self.cost.requests += 1
            items = list(page)
            self.cost.entries += len(items)
            blobs.extend(items)
        return blobs

    def finalized(self, checkpoint_dir: str, after: int | None = None) -> list[CheckpointInfo]:
        bucket, path = split_gcs_uri(checkpoint_dir)
        prefix = f"{path}/" if path else ""
        if after is None:
            blobs = self._list(bucket, prefix, commit_glob(path))
        else:
            blobs = self._list(bucket, prefix, same_length_glob(path, after), start_offset_after(path, after))
            blobs += self._list(bucket, prefix, longer_steps_glob(path, after))
        found: dict[int, CheckpointInfo] = {}
        for blob in blobs:
            parts = blob.name[len(prefix):].split("/")
            step = step_of_dir(parts[0]) if len(parts) == 2 and parts[1] == COMMIT_FILE else None
            if step is not None and (after is None or step > after):
                found[step] = CheckpointInfo(step, f"gs://{bucket}/{prefix}{parts[0]}", _timestamp(blob.time_created))
        return [found[step] for step in sorted(found)]

    def item_path(self, step_path: str) -> str | None:
        """`<step>/<item>` for a step (items, default or state), from one delimiter listing of its top level."""
        bucket, path = split_gcs_uri(step_path)
        item = item_of(self._folders(bucket, f"{path}/"))
        return f"gs://{bucket}/{path}/{item}" if item else None

    def newest_backup(self, backup_dir: str, nodes: int) -> int | None:
        """The newest step GKE MTC's replicator backed up completely under `backup_dir` (`<bucket>/<run_name>`):
        every node's `.meta` in a time folder of this run (core.measure.listing.complete_backups) with its data
        beside it (one delimiter listing per folder, newest step first, until one holds); None when none does."""
        bucket, path = split_gcs_uri(backup_dir)
        prefix = f"{path}/" if path else ""
        metas = [(blob.name[len(prefix):], int(blob.size or 0))
                 for blob in self._list(bucket, prefix, f"{prefix}*/*.meta")]
        complete = complete_backups(metas, path.rsplit("/", 1)[-1], nodes)
        for step in sorted(complete, reverse=True):
            if all(data_complete(count, self._folders(bucket, f"{prefix}{folder}/"))
                   for folder, count in complete[step].items()):
                return step
        return None

    def _folders(self, bucket: str, prefix: str) -> list[str]:
        """The folder names directly under `prefix`, each with its trailing `/` (one delimiter listing)."""
        with _mapped_errors():
            iterator = self.hook.get_conn().list_blobs(bucket, prefix=prefix, delimiter="/", retry=None,
                                                       timeout=LISTING_TIMEOUT)
            for page in iterator.pages:
                self.cost.requests += 1
                list(page)
        return [name[len(prefix):] for name in iterator.prefixes]


@contextlib.contextmanager
def _mapped_errors() -> Iterator[None]:
    """The client library's errors as the provider's (adapters.retry.map_error): google-cloud-storage raises
    google.api_core's Forbidden (or its own InvalidResponse) for a 403, which must reach the launch as
    PermissionDenied naming the permission, so a refusal fails the try for good instead of spending retries."""
    from mtc_provider.adapters import retry

    try:
        yield
    except Exception as exc:  # noqa: BLE001 - mapped and re-raised
        mapped = retry.map_error(exc, LIST_PERMISSION)
        if mapped is exc:
            raise
        raise mapped from exc


def _timestamp(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def open_store(checkpoint_dir: str, gcp_conn_id: str = "google_cloud_default",
               impersonation_chain: str | list[str] | None = None) -> CheckpointStore:
    """The store for a checkpoint directory: gs:// goes to GCS; a folder an installed target serves (a local
    target's bucket folder: its home's local GCS, mtc_local.target.gcs) to that target's store; any other absolute
    path or file:// is read locally."""
    if checkpoint_dir.startswith("gs://"):
        split_gcs_uri(checkpoint_dir)
        return GcsCheckpointStore(gcp_conn_id, impersonation_chain=impersonation_chain)
    from mtc_provider.targets.registry import store_for_path

    return store_for_path(local_path(checkpoint_dir)) or LocalCheckpointStore()


@dataclass(frozen=True)
class Newest:
    """One listing of a run's checkpoints: the finalized persistent checkpoints newer than `after` (oldest first),
    and the newest MTC replicator backup complete on every node (None: none, or no backups listed)."""

    finalized: tuple[CheckpointInfo, ...]
    backup: int | None
    backup_dir: str | None
    after: int | None

    @property
    def persistent(self) -> CheckpointInfo | None:
        """The newest finalized persistent checkpoint newer than `after`."""
        return self.finalized[-1] if self.finalized else None

    def restorable(self) -> CheckpointInfo | None:
        """The newest restorable checkpoint newer than `after`: the persistent one, or a newer replicator backup."""
        backup, info = self.backup, self.persistent
        if backup is not None and (self.after is None or backup > self.after) and (info is None or backup > info.step):
            return CheckpointInfo(backup, f"{(self.backup_dir or '').rstrip('/')} (MTC replicator backup)", None)
        return info


def list_newest(store: Any, checkpoint_dir: str, after: int | None = None, backup_dir: str | None = None,
                nodes: int | None = None) -> Newest:
    """One listing of what a run can resume from (blocking): the finalized checkpoints newer than `after` and, in
    multi-tier mode (`backup_dir` and `nodes` given), the newest complete replicator backup (GCS only: a local store
    has none)."""
    found = store.finalized(checkpoint_dir, after)
    lister = getattr(store, "newest_backup", None) if backup_dir and nodes else None
    return Newest(tuple(found), lister(backup_dir, nodes) if lister else None, backup_dir, after)


class AsyncCheckpointStore:
    """The triggers' side: the same store, each call in a worker thread so the event loop keeps running.
    `backup_dir`, `backup_nodes`: where the run's MTC replicator backups are listed, and on how many nodes."""

    def __init__(self, checkpoint_dir: str, gcp_conn_id: str = "google_cloud_default",
                 impersonation_chain: str | list[str] | None = None, backup_dir: str | None = None,
                 backup_nodes: int | None = None) -> None:
        self.checkpoint_dir, self.backup_dir, self.backup_nodes = checkpoint_dir, backup_dir, backup_nodes
        self.store = open_store(checkpoint_dir, gcp_conn_id, impersonation_chain)

    async def finalized(self, after: int | None = None) -> list[CheckpointInfo]:
        return await asyncio.to_thread(self.store.finalized, self.checkpoint_dir, after)

    async def newest(self, after: int | None = None) -> Newest:
        """The finalized checkpoints newer than `after` and the newest complete backup (when listed): list_newest."""
        return await asyncio.to_thread(list_newest, self.store, self.checkpoint_dir, after, self.backup_dir,
                                       self.backup_nodes)


__all__ = ["AsyncCheckpointStore", "CheckpointStore", "GcsCheckpointStore", "ListingCost",
           "LocalCheckpointStore", "Newest", "list_newest", "open_store", "split_gcs_uri"]
