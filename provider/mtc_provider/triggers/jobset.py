"""The trigger that follows one JobSet until it ends, without holding a worker slot.

It carries only serializable, non-secret values (the connection dict from `targets.connection_for`: endpoint, CA,
connection id; never a token) and rebuilds its hook inside the triggerer, so every client mints a fresh token. It
watches from the resourceVersion the operator saw (an unreachable API is waited out for `api_outage_timeout`:
MtcJobSetAsyncHook.watch), logs each in-cluster restart, and yields one typed JobSetEvent. It creates nothing, except
the next attempt of its try when the operator allows it (triggers.next_in_try: by its deterministic name, so a
triggerer restart or a second copy follows the one created, never a duplicate).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, AsyncIterator, Mapping

from airflow.triggers.base import BaseTrigger, TriggerEvent

from mtc_provider.adapters import metrics, retry
from mtc_provider.adapters.checkpoint_stores import AsyncCheckpointStore, Newest
from mtc_provider.core.attempt.outage import OutageClock
from mtc_provider.core.attempt.pod_start import PodStart
from mtc_provider.core.measure.listing import ListingOutage, describe_listing_error
from mtc_provider.core.measure.stall import StallWatch
from mtc_provider.core.attempt.launch_options import WatchSettings
from mtc_provider.core.attempt.status import JobSetState, evaluate_jobset

from mtc_provider.core.attempt import jobset_events as events  # the event kinds and the typed event (their one home)
from mtc_provider.triggers.ledger_writer import LedgerWriter


# What serialize() writes besides `watch`: the attempt, never a secret (a trigger rebuilt from it resumes).
SERIALIZED = ("connection", "namespace", "name", "resource_version", "restarts_seen", "checkpoint_dir", "backup_dir",
              "backup_nodes", "delete_on_kill", "extra", "gcp_conn_id", "impersonation_chain")


class JobSetTrigger(BaseTrigger):
    """Watch JobSet `namespace/name` until it succeeds, fails, disappears or stalls.

    :param connection: serializable connection details (see `targets.connection_for`).
    :param namespace: the JobSet's namespace.
    :param name: the JobSet's name.
    :param resource_version: resume the watch from here (the operator's last read); None: start now.
    :param restarts_seen: in-cluster restarts already reported, so a resumed trigger logs only new ones.
    :param checkpoint_dir: the run's persistent checkpoint directory, for stall detection and the progress line.
    :param backup_dir: where the MTC replicator's backups of the run are listed (multi-tier mode:
        core.measure.progress.replicator_backup_dir), for progress and the restorable step; None: not listed.
    :param backup_nodes: how many nodes (hosts) the run has: a backup counts only once every one of them has it.
    :param delete_on_kill: delete the JobSet when a user kills the deferred task (not on triggerer restart).
    :param extra: serializable values echoed back in the event (the operator's attempt bookkeeping).
    :param gcp_conn_id: the connection the checkpoint listing uses (the operator's own, never a default).
    :param impersonation_chain: service account(s) the listing impersonates.
    :param watch: how it watches: the operator's `LaunchOptions.watch()` (a WatchSettings, or its `to_dict()` as
        Airflow's trigger table keeps it); None: a bare watch, no pod logs nor stall detection.
    """

    def __init__(self, connection: dict[str, Any], namespace: str, name: str, resource_version: str | None = None,
                 restarts_seen: int = 0, checkpoint_dir: str | None = None, backup_dir: str | None = None,
                 backup_nodes: int | None = None, delete_on_kill: bool = True, extra: dict[str, Any] | None = None,
                 gcp_conn_id: str | None = None, impersonation_chain: str | list[str] | None = None,
                 watch: WatchSettings | Mapping[str, Any] | None = None, **row_0_1: Any) -> None:
        super().__init__()
        self.connection = dict(connection)
        self.namespace = namespace
        self.name = name
        self.resource_version = resource_version
        self.restarts_seen = restarts_seen
        self.checkpoint_dir = checkpoint_dir
        self.backup_dir = backup_dir
        self.backup_nodes = backup_nodes
        self.delete_on_kill = delete_on_kill
        self.extra = dict(extra or {})
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = list(impersonation_chain) if isinstance(impersonation_chain, (list, tuple)) \
            else impersonation_chain
        self.watch = WatchSettings.from_dict(watch) if isinstance(watch, Mapping) else watch or WatchSettings()
        if row_0_1:  # a row release 0.1.0 serialized: its settings by flat names, no `watch`
            self.watch = WatchSettings.from_row_0_1(row_0_1)
        self._follower = None  # the leader pod's log (adapters.pod_logs.LeaderLogFollower), made off the loop
        self._logs_at = float("-inf")
        self._logs_failing = False
        self._live_tracker = None  # workload steps seen this start of the pods (ProgressTracker), for the rate
        self._live_source: str | None = None  # core.measure.step_log FROM_LOG | FROM_EVENTS
        self._live_since: float | None = None  # this start of the pods (older workload events are not its steps)
        self._xcom_failing = False
        self.restored_step: int | None = None  # the newest step a start of the pods restored (its restore line)
        self._watch_since = float("-inf")  # when this watch began: older restore events are another attempt's
        self.stall = StallWatch(self.watch.stall_timeout, self.watch.stall_cadence,  # clocks since it started
                                self.watch.times.first_step_floor)
        self._listing = ListingOutage(checkpoint_dir or "", float(self.watch.times.listing_timeout))
        self.listing_error = ""  # set when the listing kept failing for listing_timeout
        self._pods_started: bool | None = None  # None: this api cannot list pods (the JobSet phase decides)
        self._pods_list_warned_at = float("-inf")
        self._pods_checked_at = float("-inf")
        self._events_failing = False
        self._pod_start: PodStart | None = None  # the starts of the pods' clocks, from the first listing
        self._progress_tracker = None  # finalized steps seen, for the progress line's rate (ProgressTracker)
        self._progress_at = float("-inf")
        self.last_progress: dict[str, Any] | None = None  # the latest ProgressReport.to_xcom()
        self._checkpoints = None  # one store for the whole watch (AsyncCheckpointStore): its client carries over
        self._ledger: LedgerWriter | None = None  # the facts this watch adds to the run's ledger
        self._following: JobSetTrigger | None = None  # the later attempt of this try watched now (next_in_try)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {**{field: getattr(self, field) for field in SERIALIZED}, "watch": self.watch.to_dict()})

    @property
    def api_outage_timeout(self) -> float:  # what triggers.next_in_try bounds its own API calls by
        return self.watch.times.api_outage_timeout

    clock = staticmethod(time.time)  # wall clock of the stall and startup checks (tests step it by hand)

    def build_hook(self):
        """The triggers' JobSet client, its api built (blocking: cold imports; call it off the loop)."""
        from mtc_provider.hooks.jobset import MtcJobSetAsyncHook

        hook = MtcJobSetAsyncHook(self.connection, poll_interval=self.watch.times.poll_interval,
                                  request_timeout=self.watch.pacing.request_timeout)
        hook.api  # noqa: B018 - built here, off the loop
        return hook

    async def check_stall(self, state: JobSetState) -> str | None:
        """A reason when the run stopped making progress (core.measure.stall), else None: on every status change and
        every `poll_interval`, when `checkpoint_dir` and `stall_timeout` are set. The clocks run while the pods run,
        on successful listings (off the loop; one that keeps failing for `listing_timeout` sets `listing_error`)."""
        from mtc_provider.core.measure.progress import PERSISTENT, REPLICATOR
        from mtc_provider.core.attempt.status import PENDING

        now, stall = self.clock(), self.stall
        if stall.signal is None or state.phase == PENDING or self._pods_started is False:
            stall.not_running(now)
            return None
        stall.running(now)
        signal = stall.signal
        persistent = signal.newest.get(PERSISTENT)
        try:
            newest = await self.newest_checkpoints(after=persistent.step if persistent else None)
        except Exception as exc:  # a failed listing is not "no progress": the stall clock stops
            line, self.listing_error = self._listing.failed(now, exc)  # ends the watch after listing_timeout
            self.log.warning("%s", line)
            return None
        failed = self._listing.answered(now)
        if failed is not None:
            stall.pause(failed)
            self.log.info("listing %s works again after %.0fs", self.checkpoint_dir, failed)
        info, backup_step = newest.persistent, newest.backup
        if info is not None and signal.observe(info.step, PERSISTENT, now, info.commit_time):
            self.log.info("new finalized checkpoint: step %d in %s", info.step, self.checkpoint_dir)
        if backup_step is not None and signal.observe(backup_step, REPLICATOR, now):
            self.log.info("new MTC replicator backup: step %d in %s", backup_step, self.backup_dir)
        if info is not None:
            stall.saves.observe(info.step, now, "persistent checkpoint", info.commit_time)
        stall.saves.observe(backup_step, now, "MTC replicator backup")
        stall.saves.observe(self.restored_step, now, "restored by a start of the pods")
        if self._progress_enabled():  # the progress line's newest checkpoint reuses these listings
            restorable = signal.restorable
            if restorable is not None:
                commit = restorable.at if restorable.source == PERSISTENT else None
                self._progress_tracker_now(now).observe(restorable.step, commit, now)
        await self._read_events(now)  # the local workload's reported step (no-op on a bucket)
        return stall.verdict(now, f"JobSet {self.namespace}/{self.name}", self.checkpoint_dir,
                             logs_readable=not (self.watch.pod_logs.enabled and self._logs_failing))

    async def newest_checkpoints(self, after: int | None = None) -> Newest:
        """The newest finalized persistent checkpoint newer than `after` and complete replicator backup, listed off
        the loop and added to the run's ledger: what the stall clock, the progress line and an attempt's end
        (triggers.attempt_end, triggers.stall_end: `.restorable()`) decide on."""
        if self._checkpoints is None:  # opened once, off the loop: its client carries over
            self._checkpoints = await asyncio.to_thread(
                AsyncCheckpointStore, self.checkpoint_dir, self.gcp_conn_id or "google_cloud_default",
                self.impersonation_chain, self.backup_dir, self.backup_nodes)
        newest = await self._checkpoints.newest(after)
        self.facts().listed(newest, self.clock())
        return newest

    def _stall_watch(self) -> bool:
        return bool(self.checkpoint_dir and self.watch.stall_timeout)

    def _progress_enabled(self) -> bool:
        return bool(self.checkpoint_dir and self.watch.times.progress_interval and self.extra.get("target_step"))

    def _progress_tracker_now(self, now: float):
        from mtc_provider.core.measure.progress import ProgressTracker

        if self._progress_tracker is None:
            self._progress_tracker = ProgressTracker(started_at=now)
        return self._progress_tracker

    async def report_progress(self, restarts: int) -> dict[str, Any] | None:
        """Every `progress_interval`: log one progress line and keep its figures for the next event. The stall
        check's listing feeds them, else a listing here; a failed one logs a warning and reports the last figures."""
        from mtc_provider.core.measure.progress_report import progress_report

        now = self.clock()
        if not self._progress_enabled() or now - self._progress_at < float(self.watch.times.progress_interval):
            return None
        self._progress_at = now
        tracker = self._progress_tracker_now(now)
        if not self._stall_watch():
            try:
                info = (await self.newest_checkpoints(after=tracker.latest_step)).restorable()
            except Exception as exc:  # progress is advisory: never ends the watch
                self.log.warning("progress: listing %s failed (%s)", self.checkpoint_dir,
                                 describe_listing_error(exc))
            else:
                if info is not None:
                    tracker.observe(info.step, info.commit_time, now)
        await self._read_events(now)
        live = self._live_tracker
        step, live_rate = (live.latest_step, live.steps_per_hour(now)) if live is not None else (None, None)
        # the run's newest restorable checkpoint: one this watch saw, or the one this attempt started from
        started_from = (self.extra.get("history") or [None])[-1]
        newest = max((s for s in (tracker.latest_step, started_from) if isinstance(s, int)), default=None)
        report = progress_report(step, int(self.extra["target_step"]),
                                 live_rate if step is not None else tracker.steps_per_hour(now),
                                 newest, restarts=restarts, attempt=int(self.extra.get("attempt") or 1),
                                 source=self._live_source, updated_at=round(now, 3))
        self.log.info("JobSet %s/%s: %s", self.namespace, self.name, report.line())
        metrics.progress(metrics.trigger_tags(self), report.steps_per_hour, tracker.seconds_since_checkpoint(now))
        # The one signal's figures beside the report (keys only added): which source each step comes from.
        self.last_progress = {**report.to_xcom(), **(self.stall.signal.figures() if self.stall.signal else {})}
        await self._push_progress(self.last_progress)
        return self.last_progress

    def _observe_step(self, step: int, now: float, source: str, at: float | None = None) -> None:
        """A step the workload reported, seen at `now`; `at`: when it reported it (a log line's or event's time)."""
        from mtc_provider.core.measure.progress import ProgressTracker

        if self._live_tracker is None:
            self._live_tracker = ProgressTracker(started_at=now, window_s=900.0)
        # timed when it was written (a log line's, an event's time): a read that finds many steps at once, up to a
        # pod_logs_interval late, would otherwise make the first rate, and the ETA, several times too fast
        if self._live_tracker.observe(step, at, now) or self._live_source is None:
            self._live_source = source
        if self.stall.signal is not None:  # a reported step is progress too (the stall clock: check_stall)
            self.stall.signal.observe(step, source, now, at)
        took = self.stall.first_steps.step(now, at)
        if took is not None:
            self.log.info("this start of the pods of JobSet %s/%s reported its first step %.0f s after its pods ran",
                          self.namespace, self.name, took)

    def _new_start_of_pods(self) -> None:
        """An in-cluster restart: new pods, a new leader, and a step that starts again from a checkpoint."""
        self._follower, self._live_tracker, self._live_source = None, None, None
        if self.stall.signal is not None:
            self.stall.signal.new_start()
        self.stall.first_steps.new_start()
        self._live_since = self.clock()

    async def _latest_event(self, kind: str, since: float) -> dict[str, Any] | None:
        """The local workload's newest `kind` event at or after `since` (adapters.workload_events.alatest_event)."""
        from mtc_provider.adapters.workload_events import alatest_event

        event = await alatest_event(self.checkpoint_dir, kind, since)
        self.facts().workload_event(event)
        return event

    async def _read_events(self, now: float) -> None:
        """The local workload's newest `step` event of this start of the pods."""
        from mtc_provider.core.measure.step_log import FROM_EVENTS

        for save in ("save_end", "save_blocking"):  # a local save, for the run's ledger (the light workload's ends
            await self._latest_event(save, self._live_since or 0)  # when it stops blocking: it writes in place)
        event = await self._latest_event("step", self._live_since or 0)
        if event is not None:
            self._observe_step(int(event["step"]), now, FROM_EVENTS, float(event["ts"]))

    async def read_restores(self) -> None:
        """The local workload's newest `restore` event of this watch: the step a start of the pods resumed from, as
        the leader's log says it on a cluster (follow_pod_logs)."""
        event = await self._latest_event("restore", self._watch_since)
        if event is not None:
            self._restored(int(event["step"]))

    def _restored(self, step: int) -> None:
        if self.restored_step is None or step > self.restored_step:
            self.log.info("a start of the pods of JobSet %s/%s restored step %d: restorable progress",
                          self.namespace, self.name, step)
            self.restored_step = step
            if self.stall.saves is not None:  # what the next start can resume from: restorable progress
                self.stall.saves.observe(step, self.clock(), "restored by a start of the pods")

    async def _push_progress(self, figures: dict[str, Any]) -> None:
        """The figures to the task's `progress` XCom now; a failure is logged once and never ends the watch."""
        from mtc_provider.adapters.live_xcom import apush_xcom
        from mtc_provider.core.attempt.ownership import task_owner

        ti = self.task_instance
        if not self.watch.push_progress or ti is None:
            return
        try:
            await apush_xcom(task_owner(ti), self.extra.get("progress_xcom_key") or "progress", figures)
            if self._xcom_failing:
                self.log.info("progress XCom written again")
            self._xcom_failing = False
        except Exception as exc:  # noqa: BLE001 - the XCom is advisory; the event at the end carries the figures
            if not self._xcom_failing:
                self.log.warning("could not write the progress XCom during the run (%s: %s); it is written when "
                                 "the watch ends", type(exc).__name__, exc)
            self._xcom_failing = True

    async def follow_pod_logs(self) -> list[str]:
        """Every `pod_logs_interval`: the leader pod's new log lines into this log (read off the loop: the client is
        synchronous), at most `pod_logs_max_lines` and `pod_logs_max_bytes` per read; every line read counts for the
        step."""
        from mtc_provider.core.measure.step_log import FROM_LOG, bounded_lines, latest_step_line_at, parse_restore_line

        now, bounds = self.clock(), self.watch.pod_logs
        if not bounds.enabled or self._pods_started is False or now - self._logs_at < bounds.interval:
            return []  # off, the pods not all started yet (nothing to follow), or not yet time
        self._logs_at = now
        try:
            pod, stamped = await asyncio.to_thread(self._poll_leader)
        except Exception as exc:  # noqa: BLE001 - logs are advisory: never end the watch
            if not self._logs_failing:
                self.log.warning("could not read the leader pod's log of JobSet %s/%s (%s: %s); trying again every "
                                 "%.0fs", self.namespace, self.name, type(exc).__name__, exc, bounds.interval)
            self._logs_failing, self._follower = True, None
            return []
        self._logs_failing = False
        lines = [line for _, line in stamped]
        self.facts().log_lines(stamped, now)
        for step in filter(lambda s: s is not None, map(parse_restore_line, lines)):
            self._restored(step)
        shown, left_out = bounded_lines(lines, bounds.max_lines, bounds.max_bytes)
        if left_out:
            self.log.info("[%s] ... %d lines left out (pod_logs_max_lines %d, pod_logs_max_bytes %d per %.0fs)",
                          pod, left_out, bounds.max_lines, bounds.max_bytes, bounds.interval)
        for line in shown:
            self.log.info("[%s] %s", pod, line)
        latest = latest_step_line_at(stamped)
        if latest is not None:  # when the line was written, not when this read found it (up to an interval later)
            self._observe_step(latest[0].step, now, FROM_LOG, latest[1])
        return shown

    def _poll_leader(self) -> tuple[str, list[tuple[str, str]]]:
        """(leader pod name, new (timestamp, line) pairs) of the leader pod; blocking (called off the loop)."""
        from mtc_provider.triggers.attempt_end import sync_hook

        if self._follower is None:
            # Read a little more than is shown, so the newest `completed step` line is among the lines read.
            self._follower = sync_hook(self).leader_log_follower(
                self.name, self.namespace, max_lines=max(self.watch.pod_logs.max_lines, 200), clock=self.clock)
        lines = self._follower.poll_stamped()
        return self._follower.pod or "leader", lines

    def event(self, kind: str, state: JobSetState | None, restarts: int, message: str = "",
               verdict: dict[str, Any] | None = None) -> TriggerEvent:
        """This watch's one event (core.attempt.jobset_events.JobSetEvent), the ends in triggers.next_in_try and
        triggers.stall_end too: the attempt's bookkeeping (`extra`) and the last progress figures with it."""
        return TriggerEvent(events.JobSetEvent(kind, self.namespace, self.name, state, restarts, message, self.extra,
                                               self.last_progress, self.restored_step, verdict).to_payload())

    async def check_pods(self, api) -> tuple[str, str] | None:
        """(event kind, message) when the attempt's pods can never start, or waited too long (core.attempt.pod_start):
        listed every poll_interval until all run. A 403 ends the watch; other errors leave it to the JobSet phase."""
        from mtc_provider.adapters.kubernetes import Forbidden
        from mtc_provider.core.attempt.status import evaluate_pods

        now = self.clock()
        if self._pods_started is not False or now - self._pods_checked_at < self.watch.times.poll_interval:
            return None
        self._pods_checked_at = now
        try:
            listed = await api.list_pods(self.namespace, self.name)
            pods = evaluate_pods(listed)
        except Forbidden as exc:  # no retry grants a permission: say so now, delete nothing
            return events.FORBIDDEN, f"watching the pods of JobSet {self.namespace}/{self.name}: {exc}"
        except Exception as exc:  # pods are advisory: the JobSet phase decides until a listing answers again
            if now - self._pods_list_warned_at >= self.watch.times.capacity_log_interval:
                self._pods_list_warned_at = now
                self.log.warning("listing the pods of %s/%s failed (%s): following the JobSet status until the "
                                 "listing answers again", self.namespace, self.name, exc)
            return None
        times = self.watch.times
        starts = self._pod_start = self._pod_start or PodStart(times.startup_timeout, times.image_pull_timeout,
                                                               times.capacity_log_interval)
        where = f"JobSet {self.namespace}/{self.name}"
        end, lines = starts.check(pods, now, where)
        if end is None and pods.all_started:
            self._pods_started = True
        elif end is None:
            said = await self._volume_events(api, listed) if starts.wants_events(pods, now) else None
            end, more = starts.waited(pods, now, where, said)
            lines += more
        for line in lines:
            self.log.warning("%s", line)
        return end

    async def _volume_events(self, api, pods: list[dict[str, Any]]) -> list[str]:
        """The pods' volume events (core.attempt.pod_events), when this api lists events; a failure is logged once and
        gives none (events are advisory: the startup clock decides)."""
        from mtc_provider.core.attempt.pod_events import volume_event_lines

        if not hasattr(api, "list_pod_events"):
            return []
        try:
            found = await api.list_pod_events(self.namespace)
        except Exception as exc:  # noqa: BLE001 - advisory, like the pod logs
            if not self._events_failing:
                self.log.warning("could not list the events of namespace %s (%s: %s); the pods' waiting reasons are "
                                 "logged without them", self.namespace, type(exc).__name__, exc)
            self._events_failing = True
            return []
        self._events_failing = False
        return volume_event_lines(found, pods)

    def _tick(self) -> float | None:
        """Seconds between looks while nothing changes (None: none needed), for the checks that are on."""
        ticks = [self.watch.times.poll_interval] if self._stall_watch() or self._pods_started is False else []
        ticks += [float(self.watch.times.progress_interval)] if self._progress_enabled() else []
        return min(ticks + ([self.watch.pod_logs.interval] if self.watch.pod_logs.enabled else []), default=None)

    def facts(self) -> LedgerWriter:
        """What this watch adds to the run's ledger (triggers.ledger_writer), from this attempt's current start."""
        if self._ledger is None:
            self._ledger = LedgerWriter(int(self.extra.get("attempt") or 1), self.restarts_seen, self.clock(),
                                        self.watch.times.progress_interval)
        return self._ledger

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from mtc_provider.triggers.next_in_try import FollowNext
        from mtc_provider.triggers.stall_end import resumed

        # A triggerer restart rebuilds this trigger from attempt N's kwargs: the newest attempt of its try is followed
        # (triggers.next_in_try), or a stall's end it left half done finished (triggers.stall_end), not N decided again.
        first = await resumed(self)
        if first is not None and not isinstance(first, FollowNext):
            yield first
            return
        current = first.trigger if first is not None else self
        while True:
            self._following = current if current is not self else None  # on_kill stops the attempt watched now
            async for event in current._watch():  # one event, after the ledger's last write of this watch
                await current.facts().flush(current, current.clock(), final=True)
                if isinstance(event, FollowNext):  # the next attempt of this try, submitted here: watch it
                    current = event.trigger
                    break
                yield event
                return
            else:
                return

    async def _watch(self) -> AsyncIterator[TriggerEvent]:
        from mtc_provider.triggers.stall_end import next_after_stall

        # Off the triggerer's shared event loop: the target's hook and the clients' cold imports took 16-27 s in
        # one callback at load 10-12, which Airflow's watchdog reports as a deadlocked loop (adapters.kubernetes
        # AsyncKubernetesJobSetApi imports them when built; tests/triggers/test_trigger_event_loop.py)
        hook = await asyncio.to_thread(self.build_hook)
        api = hook.api
        self._live_since = self._watch_since = self.clock()
        self.facts()  # this start of the pods, from the watch's beginning
        self._pods_started = False if hasattr(api, "list_pods") else None
        restarts = self.restarts_seen
        state: JobSetState | None = None
        failed_rjob = ""
        pacing = self.watch.pacing
        outage = OutageClock(self.watch.times.api_outage_timeout, pacing.backoff_max, pacing.log_interval)
        async for item in hook.watch(self.namespace, self.name, self.resource_version, outage, self._tick, self.clock,
                                     self.log, lambda o, now: metrics.api_outage(metrics.trigger_tags(self),
                                                                                 o.failures, o.elapsed(now))):
            if isinstance(item, BaseException) and not isinstance(item, Exception):
                raise item
            if isinstance(item, retry.ApiUnreachable):  # not the attempt's failure: the JobSet was not touched
                self.log.error("%s; JobSet %s/%s was not touched", item, self.namespace, self.name)
                yield self.event(events.API_UNREACHABLE, state, restarts, str(item))
                return
            if isinstance(item, Exception):
                yield self.event(events.ERROR, state, restarts, f"{type(item).__name__}: {item}")
                return
            if item is not None and item.type == "DELETED":
                from mtc_provider.triggers.stall_end import resumed

                # another copy of this trigger ended it (and submitted the next attempt, or is about to)
                yield await resumed(self) or \
                    self.event(events.DELETED, state, restarts, "the JobSet was deleted while being watched")
                return
            if item is not None:
                state = evaluate_jobset(item.obj)
                self.facts().jobset(state.restarts, state.restarts_count_towards_max, self.clock())
                failed_rjob = state.failed_replicated_job or failed_rjob
                if state.restarts > restarts:
                    self.log.warning(
                        "JobSet %s/%s restarted in the cluster: restart %d (replicated job %s failed; %s)",
                        self.namespace, self.name, state.restarts, failed_rjob or "unknown",
                        state.reason or "restarting all slices")
                    metrics.in_cluster_restarts(metrics.trigger_tags(self), state.restarts - restarts)
                    restarts = state.restarts
                    self._new_start_of_pods()
                    if self._pods_started is not None:
                        self._pods_started = False  # new pods: watch them start again
                if state.ended:
                    self.log.info("%s", state.describe())
                    await self.read_restores()  # a last restart's restore, before the end is decided
                    from mtc_provider.triggers.attempt_end import attempt_verdict, end_retryable_attempt
                    from mtc_provider.triggers.next_in_try import submit_next

                    verdict = await attempt_verdict(self, state)  # the attempt's end, decided once, here
                    await self.facts().flush(self, self.clock(), final=True)  # before the end reads the ledger
                    # a plain retry ends here (no worker slot just to fail the try); the next attempt of this try is
                    # submitted here when the operator allowed it (FollowNext); anything else resumes the task,
                    # which applies the verdict
                    yield (await end_retryable_attempt(self, state, restarts, verdict)
                           or await submit_next(self, state, restarts, verdict)
                           or self.event(events.ENDED, state, restarts, verdict=verdict))
                    return
            if state is None and item is None and (self._stall_watch() or self._pods_started is False
                                                   or self._progress_enabled()):
                # A watch resumed from the operator's resourceVersion says nothing until the status changes;
                # a hung attempt may never change it, so read the JobSet once for the stall clock.
                with contextlib.suppress(Exception):
                    state = await hook.get_status(self.name, self.namespace)
            if state is not None and not state.terminating:
                problem = await self.check_pods(api)
                if problem:  # new pods that never start after the run's had: a stall (triggers.stall_end)
                    yield await next_after_stall(self, state, restarts, *problem) \
                        or self.event(problem[0], state, restarts, problem[1])
                    return
            if state is not None and self._stall_watch() and not state.terminating:
                reason = await self.check_stall(state)
                if reason:
                    metrics.stalled(metrics.trigger_tags(self))  # its next attempt may follow from here
                    yield await next_after_stall(self, state, restarts, events.STALLED, reason) \
                        or self.event(events.STALLED, state, restarts, reason)
                    return
                if self.listing_error:
                    yield self.event(events.LISTING_FAILED, state, restarts, self.listing_error)
                    return
            if state is not None and not state.terminating:
                await self.read_restores()
                await self.follow_pod_logs()
                await self.report_progress(restarts)
            await self.facts().flush(self, self.clock())

    async def on_kill(self) -> None:
        """The triggerer cancelled this watch "by user action": the JobSet goes only when Airflow confirms it
        (triggers.kill); a later attempt of this try, when it is the one watched now."""
        from mtc_provider.triggers.kill import on_kill

        await on_kill(getattr(self, "_following", None) or self)
