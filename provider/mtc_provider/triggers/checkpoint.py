"""Triggers that watch a checkpoint directory: progress toward a target step (with stall detection) for the
sensor, and new persistent checkpoints as asset events (an AssetWatcher's BaseEventTrigger).

They carry only primitives (directory, connection id, numbers), build their store in the triggerer, and
list it in a worker thread (adapters.checkpoint_stores.AsyncCheckpointStore).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from mtc_provider.adapters.checkpoint_stores import AsyncCheckpointStore, Newest
from mtc_provider.core.basics.payload import Payload
from mtc_provider.core.measure.listing import ListingOutage
from mtc_provider.core.measure.progress import (PERSISTENT, REPLICATOR, SOURCE_WORDS, Progress,
                                              ProgressTracker)
from mtc_provider.triggers import init_kwargs

REACHED, STALLED, LISTING_FAILED = "reached", "stalled", "listing_failed"
WATERMARK_KEY = "last_step"


class Clock:
    """Wall clock and sleep; tests swap in a scripted one so stall tests need no real waiting."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


clock = Clock()
open_async_store = AsyncCheckpointStore  # the seam tests swap for a scripted store


@dataclass(frozen=True)
class CheckpointProgressEvent:
    """The one event of CheckpointProgressTrigger: the target was reached, or the run stalled."""

    status: str
    checkpoint_dir: str
    target_step: int
    progress: Progress
    message: str = ""
    # (step, commit_time) of each checkpoint first seen while deferred, so the task log lists them all.
    new_checkpoints: list[tuple[int, float | None]] = field(default_factory=list)
    waited_s: float = 0.0
    # Where progress.latest_step was found: `checkpoints` (persistent) or `replicator-backup` (multi-tier mode).
    source: str | None = None

    def to_payload(self) -> dict[str, Any]:
        data = asdict(self)
        data["progress"] = self.progress.to_payload()
        data["new_checkpoints"] = [list(item) for item in self.new_checkpoints]
        return data

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> "CheckpointProgressEvent":
        values = dict(data)
        values["progress"] = Progress.from_payload(values["progress"])
        values["new_checkpoints"] = [tuple(item) for item in values.get("new_checkpoints", [])]
        return cls(**values)


@dataclass
class RestorableProgress(ProgressTracker):
    """Progress as the sensor and its trigger judge it: by what the next start can resume from, read as the JobSet
    trigger and the attempt's decision read it (adapters.checkpoint_stores.Newest.restorable): each finalized
    checkpoint, and in multi-tier mode a newer replicator backup complete on every node. `source`: where the latest
    step was found; `seen`: (step, commit time) of the newest `max_logged` new persistent checkpoints."""

    backup_nodes: int | None = None
    max_logged: int = 100
    source: str | None = None
    seen: list[tuple[int, float | None]] = field(default_factory=list)

    def listed(self, newest: Newest, now: float, log: Any, fresh: bool = False) -> None:
        """One listing, made at `now`. `fresh`: a listing of everything (a rescheduled poke), where a checkpoint's
        commit time, not `now`, is when its progress happened, and the ones listed before are not logged again."""
        for info in newest.finalized:  # each, oldest first: the rate is taken over the checkpoints in its window
            seen_at = min(now, info.commit_time) if fresh and info.commit_time is not None else now
            if self.observe(info.step, info.commit_time, seen_at):
                self.source = PERSISTENT
                self.seen = (self.seen + [(info.step, info.commit_time)])[-self.max_logged:]
                if not fresh:
                    log.info("new checkpoint: step %d at %s (commit time %s)", info.step, info.path, info.commit_time)
        restorable = newest.restorable()
        # Not the persistent one: a newer complete replicator backup (MaxText saves no persistent checkpoint in
        # multi-tier mode). Its time is when it was first seen: the listing gives the step only.
        if restorable is not None and restorable is not newest.persistent \
                and self.observe(restorable.step, None, now):
            self.source = REPLICATOR
            log.info("new replicator backup: step %d under %s, complete on all %d nodes", restorable.step,
                     newest.backup_dir, self.backup_nodes)

    def reached(self, target_step: int) -> str | None:
        """The message when the latest restorable step reached `target_step`; None before."""
        latest = self.latest_step
        return None if latest is None or latest < target_step else \
            f"reached step {latest} ({SOURCE_WORDS[self.source]}) >= {target_step}"


class CheckpointProgressTrigger(BaseTrigger):
    """Polls the restorable steps every `poll_interval` s (finalized checkpoints, and in multi-tier mode the
    replicator's complete backups); fires when `target_step` is reached or when no new step appeared for
    `stall_timeout` s (so a stall is reported within stall_timeout + poll_interval).

    A failed listing is not "no progress": while listings fail the stall clock is paused (the time is taken off
    it when a listing works again); listings that keep failing for `listing_timeout` s fire `listing_failed`
    with the bucket and the last error.

    :param checkpoint_dir: the run's persistent checkpoint directory, gs://... or a local path.
    :param target_step: fire when a finalized step reaches it.
    :param stall_timeout: fire (stalled) when no new finalized step appears for this many seconds.
    :param poll_interval: seconds between listings.
    :param gcp_conn_id: the Google Cloud connection that lists a gs:// directory.
    :param started_at: when waiting started (unix s), so a resumed trigger keeps the stall clock; None: now.
    :param window_s: window for steps per hour.
    :param max_logged: at most this many (step, commit time) pairs are kept for the event.
    :param listing_timeout: fire `listing_failed` when listings keep failing this many seconds.
    :param impersonation_chain: service account(s) to impersonate for the gs:// listing (names, no secret).
    :param backup_dir: (multi-tier mode) where the MTC replicator backs the run up
        (core.measure.progress.replicator_backup_dir); None: persistent checkpoints only.
    :param backup_nodes: the run's node count: a backup counts once every node has it.
    """

    def __init__(self, checkpoint_dir: str, target_step: int, stall_timeout: float, poll_interval: float = 60.0,
                 gcp_conn_id: str = "google_cloud_default", started_at: float | None = None,
                 window_s: float = 3600.0, max_logged: int = 100, listing_timeout: float = 1800.0,
                 impersonation_chain: str | list[str] | None = None, backup_dir: str | None = None,
                 backup_nodes: int | None = None) -> None:
        super().__init__()
        self.checkpoint_dir = checkpoint_dir
        self.backup_dir = backup_dir
        self.backup_nodes = backup_nodes
        self.target_step = target_step
        self.stall_timeout = stall_timeout
        self.poll_interval = poll_interval
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain  # service account names, no secret
        self.started_at = started_at
        self.window_s = window_s
        self.max_logged = max_logged
        self.listing_timeout = listing_timeout

    serialize = init_kwargs

    async def run(self) -> AsyncIterator[TriggerEvent]:
        store = open_async_store(self.checkpoint_dir, self.gcp_conn_id, self.impersonation_chain, self.backup_dir,
                                 self.backup_nodes)
        progress = RestorableProgress(started_at=self.started_at or clock.now(), window_s=self.window_s,
                                      backup_nodes=self.backup_nodes, max_logged=self.max_logged)
        listing = ListingOutage(self.checkpoint_dir, self.listing_timeout)
        while True:
            try:
                newest = await store.newest(progress.latest_step)
            except Exception as exc:  # a failed listing is not "no progress": the stall clock is paused
                now = clock.now()
                line, ended = listing.failed(now, exc)
                self.log.warning("%s", line)
                if ended:
                    yield self._event(LISTING_FAILED, progress, now, ended)
                    return
                await clock.sleep(self.poll_interval)
                continue
            now = clock.now()
            failed = listing.answered(now)
            if failed is not None:
                progress.pause(failed)
                self.log.info("listing %s works again after %.0fs", self.checkpoint_dir, failed)
            progress.listed(newest, now, self.log)
            reached = progress.reached(self.target_step)
            if reached:
                yield self._event(REACHED, progress, now, reached)
                return
            if self.stall_timeout is not None and progress.stalled(now, self.stall_timeout):
                waited = progress.seconds_without_progress(now)
                backups = f" nor complete replicator backup in {self.backup_dir}" if self.backup_dir else ""
                message = (f"no new finalized checkpoint in {self.checkpoint_dir}{backups} for {waited:.0f}s "
                           f"(stall_timeout {self.stall_timeout:.0f}s); latest step {progress.latest_step}")
                yield self._event(STALLED, progress, now, message)
                return
            await clock.sleep(self.poll_interval)

    def _event(self, status: str, progress: RestorableProgress, now: float, message: str) -> TriggerEvent:
        event = CheckpointProgressEvent(status, self.checkpoint_dir, self.target_step, progress.progress(now), message,
                                        progress.seen, progress.seconds_without_progress(now), progress.source)
        return TriggerEvent(event.to_payload())


@dataclass(frozen=True)
class CheckpointAssetEvent(Payload):
    """One new persistent checkpoint, as recorded in the asset event's extra (under "payload")."""

    step: int
    commit_time: float | None
    run_name: str
    checkpoint_dir: str
    path: str


class CheckpointAssetTrigger(BaseEventTrigger):
    """Runs in the triggerer for an AssetWatcher: yields one event per new finalized checkpoint, as it appears.

    The triggerer turns each yielded event into an asset event right away (`Trigger.submit_event`), so
    downstream DAGs start on each checkpoint while training goes on. On its first start it announces only the
    newest existing checkpoint; the last announced step is kept in the asset's state store (when the
    triggerer provides one), so a triggerer restart does not announce a step twice.

    :param checkpoint_dir: the run's persistent checkpoint directory, gs://... or a local path.
    :param run_name: the run's name, carried in each event.
    :param poll_interval: seconds between listings.
    :param gcp_conn_id: the Google Cloud connection that lists a gs:// directory.
    """

    def __init__(self, checkpoint_dir: str, run_name: str, poll_interval: float = 60.0,
                 gcp_conn_id: str = "google_cloud_default") -> None:
        super().__init__()
        self.checkpoint_dir = checkpoint_dir
        self.run_name = run_name
        self.poll_interval = poll_interval
        self.gcp_conn_id = gcp_conn_id

    serialize = init_kwargs

    async def _watermark(self) -> int | None:
        if self.asset_state_store is None:
            return None
        value = await self.asset_state_store.aget(WATERMARK_KEY)
        return int(value) if value is not None else None

    async def _set_watermark(self, step: int) -> None:
        if self.asset_state_store is not None:
            await self.asset_state_store.aset(WATERMARK_KEY, step)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        store = open_async_store(self.checkpoint_dir, self.gcp_conn_id)
        after = await self._watermark()
        first = after is None
        while True:
            try:
                found = await store.finalized(after)
            except Exception as exc:  # keep watching: the asset watcher must outlive a flaky listing
                self.log.warning("listing %s failed: %s: %s", self.checkpoint_dir, type(exc).__name__, exc)
                await clock.sleep(self.poll_interval)
                continue
            if first:  # what existed before watching began: announce only the newest
                found, first = found[-1:], False
            for info in found:
                self.log.info("checkpoint asset event: step %d (%s)", info.step, info.path)
                # Watermark first: the triggerer may stop iterating right after taking the event.
                after = info.step
                await self._set_watermark(after)
                yield TriggerEvent(CheckpointAssetEvent(info.step, info.commit_time, self.run_name,
                                                        self.checkpoint_dir, info.path).to_payload())
            await clock.sleep(self.poll_interval)
