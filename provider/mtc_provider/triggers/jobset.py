"""The trigger that follows one JobSet until it ends, without holding a worker slot.

It carries only serializable, non-secret values (the connection dict from
`adapters.jobset_factory.connection_for`: endpoint, CA, connection id; never a token) and rebuilds
its api inside the triggerer, so every client mints a fresh token. It watches from the
resourceVersion the operator saw, logs each in-cluster restart, and yields one typed JobSetEvent.
It never creates anything, so a triggerer restart simply watches again: no duplicates.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

from mtc_provider.adapters.jobset_factory import async_jobset_api
from mtc_provider.core.status import JobSetState, evaluate_jobset

ENDED = "ended"
DELETED = "deleted"
STALLED = "stalled"
ERROR = "error"


@dataclass(frozen=True)
class JobSetEvent:
    """What the trigger hands back to the operator or sensor."""

    kind: str  # ended | deleted | stalled | error
    namespace: str
    name: str
    state: JobSetState | None = None
    restarts_seen: int = 0
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_payload(self) -> dict[str, Any]:
        payload = asdict(self)
        payload["state"] = asdict(self.state) if self.state else None
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> "JobSetEvent":
        values = dict(payload)
        state = values.pop("state", None)
        return cls(state=JobSetState(**state) if state else None, **values)


class JobSetTrigger(BaseTrigger):
    """Watch JobSet `namespace/name` until it succeeds, fails, disappears or stalls.

    :param connection: serializable connection details (see `jobset_factory.connection_for`).
    :param resource_version: resume the watch from here (the operator's last read); None: start now.
    :param restarts_seen: in-cluster restarts already reported, so a resumed trigger logs only new ones.
    :param poll_interval: seconds between polls when watching is not possible, and between stall checks.
    :param checkpoint_dir: the run's persistent checkpoint directory, for stall detection.
    :param stall_timeout: seconds without checkpoint progress after which the run counts as stalled.
    :param delete_on_kill: delete the JobSet when a user kills the deferred task (not on triggerer restart).
    :param extra: serializable values echoed back in the event (the operator's attempt bookkeeping).
    :param namespace: the JobSet's namespace.
    :param name: the JobSet's name.
    """

    def __init__(
        self,
        connection: dict[str, Any],
        namespace: str,
        name: str,
        resource_version: str | None = None,
        restarts_seen: int = 0,
        poll_interval: float = 30.0,
        checkpoint_dir: str | None = None,
        stall_timeout: float | None = None,
        delete_on_kill: bool = True,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.connection = dict(connection)
        self.namespace = namespace
        self.name = name
        self.resource_version = resource_version
        self.restarts_seen = restarts_seen
        self.poll_interval = poll_interval
        self.checkpoint_dir = checkpoint_dir
        self.stall_timeout = stall_timeout
        self.delete_on_kill = delete_on_kill
        self.extra = dict(extra or {})
        self._tracker = None  # checkpoint progress since this trigger started (ProgressTracker)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "connection": self.connection,
                "namespace": self.namespace,
                "name": self.name,
                "resource_version": self.resource_version,
                "restarts_seen": self.restarts_seen,
                "poll_interval": self.poll_interval,
                "checkpoint_dir": self.checkpoint_dir,
                "stall_timeout": self.stall_timeout,
                "delete_on_kill": self.delete_on_kill,
                "extra": self.extra,
            },
        )

    def _api(self):
        return async_jobset_api(self.connection, poll_interval=self.poll_interval)

    async def check_stall(self, state: JobSetState) -> str | None:
        """A reason when the run stopped making checkpoint progress, else None.

        Called on every status change and every `poll_interval` while nothing changes, only when
        `checkpoint_dir` and `stall_timeout` are set. The clock runs while the JobSet is running or
        restarting (a pending JobSet waits for capacity, which is not a hang) and restarts with the trigger,
        so a triggerer restart can delay a stall verdict but never invent one. Listing runs off the loop.
        """
        from mtc_provider.adapters.checkpoint_stores import latest_checkpoint
        from mtc_provider.core.progress import ProgressTracker
        from mtc_provider.core.status import PENDING

        now = time.time()
        if self._tracker is None or state.phase == PENDING:
            latest = self._tracker.latest_step if self._tracker else None
            self._tracker = ProgressTracker(started_at=now)
            self._tracker.latest_step = latest
            return None
        gcp_conn_id = self.connection.get("gcp_conn_id") or "google_cloud_default"
        try:
            info = await latest_checkpoint(self.checkpoint_dir, gcp_conn_id, after=self._tracker.latest_step)
        except Exception as exc:  # a failed listing is not progress; the stall clock keeps running
            self.log.warning("listing %s failed: %s", self.checkpoint_dir, exc)
            info = None
        if info is not None and self._tracker.observe(info.step, info.commit_time, now):
            self.log.info("new finalized checkpoint: step %d in %s", info.step, self.checkpoint_dir)
        if self._tracker.stalled(now, float(self.stall_timeout)):
            return (f"stalled: no new finalized checkpoint in {self.checkpoint_dir} for "
                    f"{self._tracker.seconds_without_progress(now):.0f}s (stall_timeout {float(self.stall_timeout):.0f}s;"
                    f" newest finalized step {self._tracker.latest_step})")
        return None

    async def _events(self, api) -> AsyncIterator[Any]:
        """Watch events, re-watching after a watch ends; None every poll_interval of silence."""
        queue: asyncio.Queue = asyncio.Queue()

        async def pump() -> None:
            version = self.resource_version
            try:
                while True:
                    async for event in api.watch(self.namespace, self.name, version):
                        version = event.obj.get("metadata", {}).get("resourceVersion", version)
                        await queue.put(event)
                        if event.type == "DELETED":
                            return
                    await asyncio.sleep(self.poll_interval)  # the watch ended quietly: watch again from version
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # handed to run(): an Exception becomes an error event, others re-raise
                await queue.put(exc)

        task = asyncio.create_task(pump())
        try:
            while True:
                try:
                    item = queue.get_nowait()
                except asyncio.QueueEmpty:
                    try:
                        item = await asyncio.wait_for(queue.get(), timeout=self._tick())
                    except asyncio.TimeoutError:
                        item = None  # a quiet tick: time for a stall check
                yield item
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _tick(self) -> float | None:
        return self.poll_interval if (self.checkpoint_dir and self.stall_timeout) else None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        api = self._api()
        restarts = self.restarts_seen
        state: JobSetState | None = None
        failed_rjob = ""
        async for item in self._events(api):
            if isinstance(item, BaseException) and not isinstance(item, Exception):
                raise item
            if isinstance(item, Exception):
                yield TriggerEvent(JobSetEvent(ERROR, self.namespace, self.name, state, restarts,
                                               f"{type(item).__name__}: {item}", self.extra).to_payload())
                return
            if item is not None and item.type == "DELETED":
                yield TriggerEvent(JobSetEvent(DELETED, self.namespace, self.name, state, restarts,
                                               "the JobSet was deleted while being watched", self.extra).to_payload())
                return
            if item is not None:
                state = evaluate_jobset(item.obj)
                failed_rjob = state.failed_replicated_job or failed_rjob
                if state.restarts > restarts:
                    self.log.warning(
                        "JobSet %s/%s restarted in the cluster: restart %d (replicated job %s failed; %s)",
                        self.namespace, self.name, state.restarts, failed_rjob or "unknown",
                        state.reason or "restarting all slices")
                    restarts = state.restarts
                if state.ended:
                    self.log.info("%s", state.describe())
                    yield TriggerEvent(JobSetEvent(ENDED, self.namespace, self.name, state, restarts, extra=self.extra).to_payload())
                    return
            if state is None and item is None and self.checkpoint_dir and self.stall_timeout:
                # A watch resumed from the operator's resourceVersion says nothing until the status changes;
                # a hung attempt may never change it, so read the JobSet once for the stall clock.
                with contextlib.suppress(Exception):
                    state = evaluate_jobset(await api.get(self.namespace, self.name))
            if state is not None and self.checkpoint_dir and self.stall_timeout:
                reason = await self.check_stall(state)
                if reason:
                    yield TriggerEvent(JobSetEvent(STALLED, self.namespace, self.name, state, restarts,
                                                   reason, self.extra).to_payload())
                    return

    async def on_kill(self) -> None:
        """Only on a user's mark-failed / clear (Airflow 3.3): stop the run. Not called on triggerer restart."""
        if self.delete_on_kill:
            self.log.info("task killed by a user: deleting JobSet %s/%s", self.namespace, self.name)
            await self._api().delete(self.namespace, self.name)
