"""The trigger that follows one JobSet until it ends, without holding a worker slot.

It carries only serializable, non-secret values (the connection dict from
`targets.connection_for`: endpoint, CA, connection id; never a token) and rebuilds
its api inside the triggerer, so every client mints a fresh token. It watches from the
resourceVersion the operator saw, logs each in-cluster restart, and yields one typed JobSetEvent.
It never creates anything, so a triggerer restart simply watches again: no duplicates.
An unreachable Kubernetes API (429, 5xx, refused or hanging connections) is not the attempt's failure: the
trigger keeps watching, with backoff that honours Retry-After, for at most `api_outage_timeout` seconds of
continuous outage (core.attempt.outage), and only then hands back an `api-unreachable` event.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import Any, AsyncIterator, Mapping

from airflow.triggers.base import BaseTrigger, TriggerEvent

from mtc_provider.adapters import metrics, retry
from mtc_provider.targets import async_jobset_api, jobset_api
from mtc_provider.core.attempt import outage as outages
from mtc_provider.core.attempt.launch_options import WATCH_FLAT, WatchSettings
from mtc_provider.core.attempt.status import JobSetState, evaluate_jobset
from mtc_provider.core.basics.vocabulary import DELETE_USER_KILL

from mtc_provider.core.attempt import jobset_events as events  # the event kinds and the typed event (their one home)


ANSWER_CHECK_S = 0.5  # how often an ongoing outage checks whether the api answered again
RESUMED_FACTOR, RESUMED_MIN_S = 5.0, 60.0  # a gap above both is said in the task log ("supervision resumed")


class JobSetTrigger(BaseTrigger):
    """Watch JobSet `namespace/name` until it succeeds, fails, disappears or stalls.

    The attempt:

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
    :param watch: how it watches (below): a WatchSettings or its dict form.

    How it watches: `watch`, a core.attempt.launch_options.WatchSettings (or its `to_dict()`, as Airflow's trigger table
    keeps it): the operator's `LaunchOptions.watch()`. Instead, or on top of `watch`, the settings may be given by
    their flat names (`WATCH_FLAT`, the keyword arguments of this trigger before issue 36: a row serialized by that
    release loads as it was); they are this trigger's attributes:

    - poll_interval: seconds between polls when watching is not possible, and between stall checks.
    - stall_timeout: seconds without progress (any source: core.measure.progress.ProgressSignal.alive) after which the run
      counts as stalled; with `stall_cadence`, the least limit (the run's cadence may raise it). None: no stall check.
    - stall_cadence: the run's cadence (core.measure.cadence.Cadence.to_dict) when the limit is derived, not given: it is
      derived again from the step time the run reports (core.measure.cadence); None: `stall_timeout` as given.
      Once the workload reported a step in this attempt, two more limits hold with it: each start of the pods must
      report its first step within its first-step limit (from the earlier starts' times to their first step, at
      least `first_step_floor`), and restorable progress must advance within 3 x the restorable save gap.
    - first_step_floor: the least first-step limit of a start of the pods (core.measure.cadence.first_step_limit).
    - startup_timeout: seconds each start of the pods (the first, and each in-cluster restart) may take until every
      pod runs, before a startup-timeout event; None: no bound.
    - image_pull_timeout: seconds a start of the pods may keep failing to pull its image or create its container
      (the kubelet retries those with back-off) before an unstartable event; None: no bound.
    - capacity_log_interval: seconds between "waiting for capacity" lines.
    - listing_timeout: seconds the checkpoint listing may keep failing before a listing-failed event.
    - progress_interval: seconds between progress lines ("step N of T, S steps/h, ETA, newest checkpoint, restarts
      so far"), logged whether or not stall detection is on; needs `checkpoint_dir` and a `target_step` in `extra`.
      The latest report travels in every event (`progress`). None or 0: no lines.
    - api_outage_timeout: seconds of continuous Kubernetes API outage (429, 5xx, no answer) the watch waits out
      before an `api-unreachable` event; an answer in between starts the count again.
    - api_outage_log_interval, api_backoff_max, request_timeout: core.attempt.launch_options.ApiPacing.
    - pod_logs: stream the leader pod's log into this trigger's log (which Airflow shows in the task's log) while
      the JobSet runs; its `completed step` lines also give the progress line its step (core.measure.step_log).
      pod_logs_interval, pod_logs_max_lines, pod_logs_max_bytes bound each read (the newest lines; the rest are
      counted as left out).
    - push_progress: push each progress report to the task's `progress` XCom during the run (through the
      triggerer's Task SDK comms: adapters.live_xcom), not only when the watch ends.
    """

    def __init__(
        self,
        connection: dict[str, Any],
        namespace: str,
        name: str,
        resource_version: str | None = None,
        restarts_seen: int = 0,
        checkpoint_dir: str | None = None,
        backup_dir: str | None = None,
        backup_nodes: int | None = None,
        delete_on_kill: bool = True,
        extra: dict[str, Any] | None = None,
        gcp_conn_id: str | None = None,
        impersonation_chain: str | list[str] | None = None,
        watch: WatchSettings | Mapping[str, Any] | None = None,
        **flat: Any,
    ) -> None:
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
        if isinstance(watch, Mapping):  # as serialize() wrote it
            watch = WatchSettings.from_dict(watch)
        # The watch reads its settings as attributes by their flat names; serialize() writes them back as the record.
        for setting, value in WatchSettings.from_flat(flat, base=watch).flat().items():
            setattr(self, setting, value)
        self._follower = None  # the leader pod's log (adapters.pod_logs.LeaderLogFollower), made off the loop
        self._logs_at = float("-inf")
        self._logs_failing = False
        self._live_tracker = None  # workload steps seen this start of the pods (ProgressTracker), for the rate
        self._live_source: str | None = None  # core.measure.step_log FROM_LOG | FROM_EVENTS
        self._live_since: float | None = None  # this start of the pods (older workload events are not its steps)
        self._xcom_failing = False
        self.restored_step: int | None = None  # the newest step a start of the pods restored (its restore line)
        self._watch_since = float("-inf")  # when this watch began: older restore events are another attempt's
        self._signal = None  # every source's progress since this trigger started (core.measure.progress.ProgressSignal)
        self._first_steps = None  # each start's time to its first reported step (core.measure.progress.FirstSteps)
        self._saves = None  # when restorable progress last advanced (core.measure.progress.RestorableClock)
        self._not_running_since: float | None = None  # the pods were not running since (the saves' clock pauses)
        self._listing_failing_since: float | None = None
        self.listing_error = ""  # set when the listing kept failing for listing_timeout
        self._pods_started: bool | None = None  # None: this api cannot list pods (the JobSet phase decides)
        self._pods_list_warned_at = float("-inf")
        self._pods_checked_at = float("-inf")
        self._events_failing = False
        self._capacity_logged_at = float("-inf")
        self._start: StartClock | None = None  # the current start of the pods (None: all running, or not seen yet)
        self._progress_tracker = None  # finalized steps seen, for the progress line's rate (ProgressTracker)
        self._progress_at = float("-inf")
        self.last_progress: dict[str, Any] | None = None  # the latest ProgressReport.to_xcom()
        self._checkpoints = None  # one store for the whole watch (AsyncCheckpointStore): its client carries over

    def serialize(self) -> tuple[str, dict[str, Any]]:
        watch = WatchSettings.from_flat({setting: getattr(self, setting) for setting in WATCH_FLAT})
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "connection": self.connection,
                "namespace": self.namespace,
                "name": self.name,
                "resource_version": self.resource_version,
                "restarts_seen": self.restarts_seen,
                "checkpoint_dir": self.checkpoint_dir,
                "backup_dir": self.backup_dir,
                "backup_nodes": self.backup_nodes,
                "delete_on_kill": self.delete_on_kill,
                "extra": self.extra,
                "gcp_conn_id": self.gcp_conn_id,
                "impersonation_chain": self.impersonation_chain,
                "watch": watch.to_dict(),
            },
        )

    clock = staticmethod(time.time)  # wall clock of the stall and startup checks (tests step it by hand)

    def _api(self):
        from mtc_provider.hooks.jobset import MtcJobSetAsyncHook  # the triggers' JobSet client

        return MtcJobSetAsyncHook(self.connection, poll_interval=self.poll_interval,
                                  request_timeout=self.request_timeout).api

    def _api_name(self) -> str:
        """Which Kubernetes API, in words (no secret: the endpoint or the connection id)."""
        c = self.connection
        if c.get("cluster_url"):
            return f"the Kubernetes API of GKE cluster {c['cluster_url']}"
        if c.get("kubernetes_conn_id"):
            return f"the Kubernetes API of connection {c['kubernetes_conn_id']}"
        if c.get("home"):
            return f"the local cluster's Kubernetes API (home {c['home']})"
        return f"the Kubernetes API ({c.get('kind')})"

    async def check_stall(self, state: JobSetState) -> str | None:
        """A reason when the run stopped making progress, else None.

        Progress is the one signal of every source (core.measure.progress.ProgressSignal.alive): the workload's reported
        steps (the leader's `completed step` lines, the local workload's events), MTC replicator backups
        (`backup_dir`) and finalized persistent checkpoints; the limit is `stall_limit()` (derived from the run's
        cadence unless given). Called on every status change and every `poll_interval` while nothing changes, only
        when `checkpoint_dir` and `stall_timeout` are set. The clock runs while the JobSet is running or
        restarting with its pods started (a pending JobSet waits for capacity or an image, which is not a
        hang) and restarts with the trigger, so a triggerer restart can delay a stall verdict but never invent
        one. It only runs on successful listings: a failed listing is not "no progress" (the time it keeps
        failing is taken off the clock), and one that keeps failing for `listing_timeout` sets `listing_error`.
        Listing runs off the loop.
        """
        from mtc_provider.core.measure.progress import PERSISTENT, REPLICATOR, ProgressSignal, RestorableClock
        from mtc_provider.core.attempt.status import PENDING

        now = self.clock()
        if self._signal is None or state.phase == PENDING or self._pods_started is False:
            # Not running yet: the clock starts again, saves already seen stay seen (they never go back).
            seen = self._signal.newest if self._signal else {}
            kept = {k: v for k, v in seen.items() if k in (PERSISTENT, REPLICATOR)}
            self._signal = ProgressSignal(started_at=now, newest=kept)
            if self._not_running_since is None:
                self._not_running_since = now
            return None
        signal = self._signal
        self._first_steps_now().running(now)
        if self._saves is None:
            self._saves = RestorableClock(started_at=now)
        elif self._not_running_since is not None:  # pods waiting to run (capacity, a restart) save nothing
            self._saves.pause(now - self._not_running_since)
        self._not_running_since = None
        persistent = signal.newest.get(PERSISTENT)
        try:
            info = await self._persistent_checkpoint(after=persistent.step if persistent else None)
            backup_step = await self._backup_step()
        except Exception as exc:  # a failed listing is not "no progress": the stall clock stops
            if self._listing_failing_since is None:
                self._listing_failing_since = now
            failing = now - self._listing_failing_since
            self.log.warning("listing %s failed (%s); the stall clock is paused while listing fails (%.0fs of %.0fs)",
                             self.checkpoint_dir, describe_listing_error(exc), failing, self.listing_timeout)
            if failing > self.listing_timeout:
                self.listing_error = (f"the checkpoint listing of {self.checkpoint_dir} (bucket "
                                      f"{_bucket(self.checkpoint_dir)}) kept failing for {failing:.0f}s "
                                      f"(listing_timeout {self.listing_timeout:.0f}s): {describe_listing_error(exc)}")
            return None
        if self._listing_failing_since is not None:
            signal.pause(now - self._listing_failing_since)
            self._saves.pause(now - self._listing_failing_since)
            self.log.info("listing %s works again after %.0fs", self.checkpoint_dir, now - self._listing_failing_since)
            self._listing_failing_since = None
        if info is not None and signal.observe(info.step, PERSISTENT, now, info.commit_time):
            self.log.info("new finalized checkpoint: step %d in %s", info.step, self.checkpoint_dir)
        if backup_step is not None and signal.observe(backup_step, REPLICATOR, now):
            self.log.info("new MTC replicator backup: step %d in %s", backup_step, self.backup_dir)
        if info is not None:
            self._saves.observe(info.step, now, "persistent checkpoint", info.commit_time)
        self._saves.observe(backup_step, now, "MTC replicator backup")
        self._saves.observe(self.restored_step, now, "restored by a start of the pods")
        if self._progress_enabled():  # the progress line's newest checkpoint reuses these listings
            restorable = signal.restorable
            if restorable is not None:
                commit = restorable.at if restorable.source == PERSISTENT else None
                self._progress_tracker_now(now).observe(restorable.step, commit, now)
        await self._read_events(now)  # the local workload's reported step (no-op on a bucket)
        limit, why = self.stall_limit()
        if signal.stalled(now, limit):
            alive, restorable = signal.alive, signal.restorable
            newest = alive.words() if alive else "none seen"
            return (f"stalled: no new finalized checkpoint nor any other progress in {self.checkpoint_dir} for "
                    f"{signal.seconds_without_progress(now):.0f}s (stall limit {limit:.0f}s: {why}; newest: {newest};"
                    f" newest finalized step {restorable.step if restorable else None})")
        return self._first_step_stall(now) or self._save_stall(now)

    def _steps_known(self) -> bool:
        """Whether the stall rules that need the workload's steps hold: the limit is derived (a cadence), a start of
        this attempt reported a step, and the leader's log is readable now."""
        return bool(self.stall_cadence and self._first_steps is not None and self._first_steps.ever_stepped
                    and not (self.pod_logs and self._logs_failing))

    def _first_step_stall(self, now: float) -> str | None:
        """A reason when the current start of the pods ran longer than its first-step limit without a step."""
        waiting = self._first_steps.waiting(now) if self._first_steps is not None else None
        if waiting is None or not self._steps_known():
            return None
        limit, why = self.first_step_limit()
        if waiting <= limit:
            return None
        saved = self._saves.step if self._saves is not None else None
        return (f"stalled: this start of the pods of JobSet {self.namespace}/{self.name} has run {waiting:.0f}s "
                f"without reporting a step, although this attempt's workload reports its steps (first-step limit "
                f"{limit:.0f}s: {why}; newest restorable step {saved})")

    def first_step_limit(self) -> tuple[float, str]:
        """(seconds, why) the current start of the pods may run before its first reported step: from the earlier
        starts of this attempt (core.measure.cadence.first_step_limit), at least `stall_timeout`."""
        from mtc_provider.core.measure.cadence import first_step_limit

        measured = self._first_steps.measured if self._first_steps is not None else []
        limit, why = first_step_limit(measured, self.first_step_floor)
        given = float(self.stall_timeout)
        return (limit, why) if limit >= given else (given, f"stall_timeout {given:.0f}s, above {why}")

    def _save_stall(self, now: float) -> str | None:
        """A reason when the workload reports steps but restorable progress has not advanced for 3 x its gap."""
        if self._saves is None or not self._steps_known():
            return None
        limit = self.save_limit()
        if limit is None or not self._saves.stalled(now, limit[0]):
            return None
        saves = self._saves
        newest = f"step {saves.step} ({saves.how})" if saves.step is not None else "none"
        return (f"stalled: steps are reported (newest: {self._signal.alive.words() if self._signal.alive else None})"
                f" but nothing restorable was saved for {saves.seconds_without_progress(now):.0f}s (limit "
                f"{limit[0]:.0f}s: {limit[1]}; newest restorable: {newest})")

    def save_limit(self) -> tuple[float, str] | None:
        """(seconds, why) the run may report steps without restorable progress: 3 x the restorable save gap at the
        step time seen (core.measure.cadence.Cadence.save_limit), at least `stall_timeout`; None when unknown."""
        from mtc_provider.core.measure.cadence import Cadence

        cadence = Cadence.from_dict(self.stall_cadence)
        seen = self._signal.step_seconds() if self._signal is not None else None
        found = cadence.save_limit(seen)
        if found is None:
            return None
        given = float(self.stall_timeout)
        return found if found[0] >= given else (given, f"stall_timeout {given:.0f}s, above {found[1]}")

    def stall_limit(self) -> tuple[float, str]:
        """(seconds, why): `stall_timeout` as given, or derived again from the cadence and the step time seen.

        Until a reported step was seen in this start of the pods (pod logs off or unreadable), only saves can show
        progress, so the limit is measured against them (core.measure.cadence).
        """
        from mtc_provider.core.measure.cadence import STALL_FACTOR, Cadence
        from mtc_provider.core.measure.progress import REPORTED

        given = float(self.stall_timeout)
        if not self.stall_cadence:
            return given, "stall_timeout"
        cadence = Cadence.from_dict(self.stall_cadence)
        signal = self._signal
        seen = signal.step_seconds() if signal is not None else None
        reported = signal is not None and any(source in signal.newest for source in REPORTED)
        step = seen or cadence.step_seconds
        derived = cadence.stall_limit(step, restorable_only=not reported)
        gap = cadence.gap(step, restorable_only=not reported)
        basis = (f"{STALL_FACTOR:g} x {gap[1].describe(step)}" if gap else "no gap known yet")
        return max(given, derived), f"derived, at least {given:.0f}s; {basis}"

    async def _store(self):
        from mtc_provider.adapters.checkpoint_stores import AsyncCheckpointStore

        if self._checkpoints is None:  # opened once, off the loop: its client carries over
            self._checkpoints = await asyncio.to_thread(
                AsyncCheckpointStore, self.checkpoint_dir, self.gcp_conn_id or "google_cloud_default",
                self.impersonation_chain)
        return self._checkpoints

    async def _persistent_checkpoint(self, after: int | None):
        """The newest finalized persistent checkpoint newer than `after`, or None (listed off the loop)."""
        found = await (await self._store()).finalized(after)
        return found[-1] if found else None

    async def _backup_step(self) -> int | None:
        """The newest step the MTC replicator backed up under `backup_dir` on every node, or None (listed off the
        loop)."""
        if not self.backup_dir or not self.backup_nodes:
            return None
        return await (await self._store()).newest_backup(self.backup_dir, self.backup_nodes)

    async def _latest_checkpoint(self, after: int | None):
        """The newest restorable checkpoint newer than `after` (persistent, or a replicator backup in multi-tier
        mode), or None: what the end of an attempt decides on (triggers.attempt_end) and a resubmission resumes
        from."""
        from mtc_provider.adapters.protocols import CheckpointInfo

        info = await self._persistent_checkpoint(after)
        backup = await self._backup_step()
        if backup is not None and (after is None or backup > after) and (info is None or backup > info.step):
            return CheckpointInfo(backup, f"{self.backup_dir.rstrip('/')} (MTC replicator backup)", None)
        return info

    def _stall_watch(self) -> bool:
        return bool(self.checkpoint_dir and self.stall_timeout)

    def _progress_enabled(self) -> bool:
        return bool(self.checkpoint_dir and self.progress_interval and self.extra.get("target_step"))

    def _progress_tracker_now(self, now: float):
        from mtc_provider.core.measure.progress import ProgressTracker

        if self._progress_tracker is None:
            self._progress_tracker = ProgressTracker(started_at=now)
        return self._progress_tracker

    async def report_progress(self, restarts: int) -> dict[str, Any] | None:
        """Every `progress_interval`: log one progress line and keep its figures for the next event.

        With stall detection on, the stall check's listing feeds the figures; without it, list here (off the
        loop, like the stall check). A failed listing logs a warning and reports the last known figures.
        """
        from mtc_provider.core.measure.progress_report import progress_report

        now = self.clock()
        if not self._progress_enabled() or now - self._progress_at < float(self.progress_interval):
            return None
        self._progress_at = now
        tracker = self._progress_tracker_now(now)
        if not self._stall_watch():
            try:
                info = await self._latest_checkpoint(after=tracker.latest_step)
            except Exception as exc:  # progress is advisory: never ends the watch
                self.log.warning("progress: listing %s failed (%s)", self.checkpoint_dir,
                                 describe_listing_error(exc))
            else:
                if info is not None:
                    tracker.observe(info.step, info.commit_time, now)
        await self._read_events(now)
        live = self._live_tracker
        live_rate = live.steps_per_hour(now) if live is not None else None
        step = live.latest_step if live is not None else None
        report = progress_report(step, int(self.extra["target_step"]),
                                 live_rate if step is not None else tracker.steps_per_hour(now),
                                 tracker.latest_step, restarts=restarts, attempt=int(self.extra.get("attempt") or 1),
                                 source=self._live_source, updated_at=round(now, 3))
        self.log.info("JobSet %s/%s: %s", self.namespace, self.name, report.line())
        metrics.progress(metrics.trigger_tags(self), report.steps_per_hour, tracker.seconds_since_checkpoint(now))
        # The one signal's figures beside the report (keys only added): which source each step comes from.
        self.last_progress = {**report.to_xcom(), **(self._signal.figures() if self._signal is not None else {})}
        await self._push_progress(self.last_progress)
        return self.last_progress

    def _observe_step(self, step: int, now: float, source: str, at: float | None = None) -> None:
        """A step the workload reported, seen at `now`; `at`: when it reported it (a log line's or event's time)."""
        from mtc_provider.core.measure.progress import ProgressTracker

        if self._live_tracker is None:
            self._live_tracker = ProgressTracker(started_at=now, window_s=900.0)
        if self._live_tracker.observe(step, None, now) or self._live_source is None:
            self._live_source = source
        if self._signal is not None:  # a reported step is progress too (the stall clock: check_stall)
            self._signal.observe(step, source, now, at)
        took = self._first_steps_now().step(now, at)
        if took is not None:
            self.log.info("this start of the pods of JobSet %s/%s reported its first step %.0f s after its pods ran",
                          self.namespace, self.name, took)

    def _first_steps_now(self):
        from mtc_provider.core.measure.progress import FirstSteps

        if self._first_steps is None:
            self._first_steps = FirstSteps()
        return self._first_steps

    def _new_start_of_pods(self) -> None:
        """An in-cluster restart: new pods, a new leader, and a step that starts again from a checkpoint."""
        self._follower, self._live_tracker, self._live_source = None, None, None
        if self._signal is not None:
            self._signal.new_start()
        self._first_steps_now().new_start()
        self._live_since = self.clock()

    def _events_file(self) -> str | None:
        """The local workload's event file of process 0, beside a local checkpoint directory; None on a bucket."""
        import os

        if not self.checkpoint_dir or "://" in self.checkpoint_dir:
            return None
        return os.path.join(os.path.dirname(self.checkpoint_dir.rstrip("/")), "events", "process-0.jsonl")

    async def _latest_event(self, kind: str, since: float) -> dict[str, Any] | None:
        """The local workload's newest `kind` event at or after `since` (off the loop); None on a bucket, or when
        its event file holds none."""
        from mtc_provider.adapters.workload_events import latest_event

        path = self._events_file()
        if path is None:
            return None
        try:
            event = await asyncio.to_thread(latest_event, path, kind)
        except OSError:
            return None
        return event if event is not None and float(event.get("ts") or 0) >= since else None

    async def _read_events(self, now: float) -> None:
        """The local workload's newest `step` event of this start of the pods."""
        from mtc_provider.core.measure.step_log import FROM_EVENTS

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
            if self._saves is not None:  # what the next start can resume from: restorable progress
                self._saves.observe(step, self.clock(), "restored by a start of the pods")

    async def _push_progress(self, figures: dict[str, Any]) -> None:
        """The figures to the task's `progress` XCom now; a failure is logged once and never ends the watch."""
        from mtc_provider.adapters.live_xcom import apush_xcom

        ti = self.task_instance
        if not self.push_progress or ti is None:
            return
        try:
            owner = {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id,
                     "map_index": getattr(ti, "map_index", -1)}
            await apush_xcom(owner, self.extra.get("progress_xcom_key") or "progress", figures)
            if self._xcom_failing:
                self.log.info("progress XCom written again")
            self._xcom_failing = False
        except Exception as exc:  # noqa: BLE001 - the XCom is advisory; the event at the end carries the figures
            if not self._xcom_failing:
                self.log.warning("could not write the progress XCom during the run (%s: %s); it is written when "
                                 "the watch ends", type(exc).__name__, exc)
            self._xcom_failing = True

    async def follow_pod_logs(self) -> list[str]:
        """Every `pod_logs_interval`: the leader pod's new log lines into this log, bounded; steps from them.

        Read off the loop (the Kubernetes client is synchronous) through the same pod-log adapter the failed pods'
        tails use. At most `pod_logs_max_lines` lines and `pod_logs_max_bytes` bytes per read reach the log (the
        newest; a line says how many were left out); every line read still counts for the step.
        """
        from mtc_provider.core.measure.step_log import FROM_LOG, bounded_lines, latest_step_line_at, parse_restore_line

        now = self.clock()
        if not self.pod_logs or self._pods_started is False or now - self._logs_at < self.pod_logs_interval:
            return []  # off, the pods not all started yet (nothing to follow), or not yet time
        self._logs_at = now
        try:
            pod, stamped = await asyncio.to_thread(self._poll_leader)
        except Exception as exc:  # noqa: BLE001 - logs are advisory: never end the watch
            if not self._logs_failing:
                self.log.warning("could not read the leader pod's log of JobSet %s/%s (%s: %s); trying again every "
                                 "%.0fs", self.namespace, self.name, type(exc).__name__, exc, self.pod_logs_interval)
            self._logs_failing, self._follower = True, None
            return []
        self._logs_failing = False
        lines = [line for _, line in stamped]
        for step in filter(lambda s: s is not None, map(parse_restore_line, lines)):
            self._restored(step)
        shown, left_out = bounded_lines(lines, self.pod_logs_max_lines, self.pod_logs_max_bytes)
        if left_out:
            self.log.info("[%s] ... %d lines left out (pod_logs_max_lines %d, pod_logs_max_bytes %d per %.0fs)",
                          pod, left_out, self.pod_logs_max_lines, self.pod_logs_max_bytes, self.pod_logs_interval)
        for line in shown:
            self.log.info("[%s] %s", pod, line)
        latest = latest_step_line_at(stamped)
        if latest is not None:  # when the line was written, not when this read found it (up to an interval later)
            self._observe_step(latest[0].step, now, FROM_LOG, latest[1])
        return shown

    def _poll_leader(self) -> tuple[str, list[tuple[str, str]]]:
        """(leader pod name, new (timestamp, line) pairs) of the leader pod; blocking (called off the loop)."""
        from mtc_provider.adapters.pod_logs import LeaderLogFollower, pod_logs_for

        if self._follower is None:
            logs = pod_logs_for(jobset_api(self.connection, request_timeout=self.request_timeout))
            if logs is None:
                raise RuntimeError("this cluster connection has no pod log endpoint")
            # Read a little more than is shown, so the newest `completed step` line is among the lines read.
            self._follower = LeaderLogFollower(logs, self.namespace, self.name,
                                               max_lines=max(self.pod_logs_max_lines, 200), clock=self.clock)
        lines = self._follower.poll_stamped()
        return self._follower.pod or "leader", lines

    def _event(self, kind: str, state: JobSetState | None, restarts: int, message: str = "") -> TriggerEvent:
        return TriggerEvent(events.JobSetEvent(kind, self.namespace, self.name, state, restarts, message, self.extra,
                                               self.last_progress, self.restored_step).to_payload())

    async def check_pods(self, api) -> tuple[str, str] | None:
        """(event kind, message) when the attempt's pods can never start, or waited too long.

        Until every pod runs, list them every poll_interval. Each start of the pods (the first one, and each
        in-cluster restart: a new restart-attempt label, or pods that ran and are being replaced) has its own
        clock. What cannot heal (InvalidImageName, a missing Secret/ConfigMap) ends the watch with the pod's own
        message at once; pull and create errors the kubelet retries are logged every capacity_log_interval and end
        it after image_pull_timeout; Unschedulable pods are logged as "waiting for capacity"; startup_timeout bounds
        the whole start. Scheduled pods that wait (ContainerCreating: an MTC CSI ramdisk that cannot be mounted) are
        logged every capacity_log_interval with what Kubernetes says about them, their volume events (FailedMount,
        FailedAttachVolume: reason, message, node; core.attempt.pod_events), which the startup-timeout message carries too.
        A 403 on the pods ends the watch (forbidden); other listing errors fall back to the JobSet phase.
        """
        from mtc_provider.adapters.kubernetes import Forbidden
        from mtc_provider.core.attempt.status import evaluate_pods

        now = self.clock()
        if self._pods_started is not False or now - self._pods_checked_at < self.poll_interval:
            return None
        self._pods_checked_at = now
        try:
            listed = await api.list_pods(self.namespace, self.name)
            pods = evaluate_pods(listed)
        except Forbidden as exc:  # no retry grants a permission: say so now, delete nothing
            return events.FORBIDDEN, f"watching the pods of JobSet {self.namespace}/{self.name}: {exc}"
        except Exception as exc:  # pods are advisory: the JobSet phase decides until a listing answers again
            if now - self._pods_list_warned_at >= self.capacity_log_interval:
                self._pods_list_warned_at = now
                self.log.warning("listing the pods of %s/%s failed (%s): following the JobSet status until the "
                                 "listing answers again", self.namespace, self.name, exc)
            return None
        if self._start is None or self._start.attempt != pods.restart_attempt:
            self._start = StartClock(since=now, attempt=pods.restart_attempt)  # a new start of the pods
        start = self._start
        where = f"JobSet {self.namespace}/{self.name}"
        if pods.permanent_error:
            return events.UNSTARTABLE, f"a pod of {where} can never start: {pods.permanent_error}"
        if pods.all_started:
            self._pods_started, self._start = True, None
            return None
        log_now = now - self._capacity_logged_at >= self.capacity_log_interval
        if pods.healing_error:
            start.pull_since = now if start.pull_since is None else start.pull_since
            start.first_pull_error = start.first_pull_error or pods.healing_error
            waited = now - start.pull_since
            bound = ("no bound" if self.image_pull_timeout is None
                     else f"image_pull_timeout {float(self.image_pull_timeout):.0f}s")
            if self.image_pull_timeout is not None and waited > float(self.image_pull_timeout):
                first = "" if start.first_pull_error == pods.healing_error else f" (first: {start.first_pull_error})"
                return events.UNSTARTABLE, (f"the pods of {where} could not pull their image or create their "
                                            f"container for {waited:.0f}s ({bound}): {pods.healing_error}{first}")
            if log_now:
                self.log.warning("%s: waiting for the image pull / container creation for %.0fs (%s; Kubernetes "
                                 "retries with back-off): %s", where, waited, bound, pods.healing_error)
                self._capacity_logged_at = now
        elif pods.scheduled < pods.total and log_now:
            self.log.warning("%s %s", where, pods.capacity_line())
            self._capacity_logged_at = now
        timed_out = self.startup_timeout is not None and now - start.since > float(self.startup_timeout)
        if pods.scheduled and (log_now or timed_out):  # scheduled pods wait: what does Kubernetes say about them?
            start.volume_events = await self._volume_events(api, listed) or start.volume_events
            if log_now and not pods.healing_error and pods.scheduled == pods.total:
                said = "; ".join(start.volume_events) or "no volume events"
                self.log.warning("%s: waiting for the pods to start for %.0fs (%s): %s; Kubernetes events: %s", where,
                                 now - start.since, _bound(self.startup_timeout), pods.waiting_line(), said)
                self._capacity_logged_at = now
        if timed_out:
            attempt = pods.restart_attempt or 0
            said = f"; Kubernetes events: {'; '.join(start.volume_events)}" if start.volume_events else ""
            return events.STARTUP_TIMEOUT, (f"{where} did not start within startup_timeout "
                                            f"{float(self.startup_timeout):.0f}s (pods of restart attempt {attempt}): "
                                            f"{pods.waiting_line()}{said}")
        return None

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

    async def _events(self, api) -> AsyncIterator[Any]:
        """Watch events, re-watching after a watch ends; None every poll_interval of silence.

        An outage of the API (Retryable: 429, 5xx, no answer, after the adapter's bounded retries) is waited
        out here, for at most api_outage_timeout; then an ApiUnreachable is handed to run(). Any other error is
        handed over at once.
        """
        queue: asyncio.Queue = asyncio.Queue()

        async def pump() -> None:
            version = self.resource_version
            outage = outages.OutageClock(self.api_outage_timeout, self.api_backoff_max, self.api_outage_log_interval)
            answers_then = None  # the api's answer count at the last failure
            said_back = None  # says "answers again" when the api answers a quiet watch (no event to carry it)
            try:
                while True:
                    began = self.clock()  # an outage starts with its first failing call, not after its inner retries
                    try:
                        async for event in api.watch(self.namespace, self.name, version):
                            if outage.ongoing:
                                self.log.info("%s answers again after %.0f s; watching JobSet %s/%s",
                                              self._api_name(), outage.reset(self.clock()), self.namespace,
                                              self.name)
                            began = self.clock()  # it answered: a later failure is a new call's
                            version = event.obj.get("metadata", {}).get("resourceVersion", version)
                            await queue.put(event)
                            if event.type == "DELETED":
                                return
                    except retry.Retryable as exc:
                        answers = getattr(api, "answers", None)
                        if outage.ongoing and answers is not None and answers != answers_then:
                            outage.reset()  # it answered in between: that outage is over, this is a new one
                        answers_then = answers
                        now = self.clock()
                        delay = outage.failed(now, retry.describe_failure(exc), retry.retry_after_of(exc),
                                              started=_first_failure(api, began, now))
                        if outage.exhausted(now):
                            raise retry.ApiUnreachable(self._api_name(), outage.elapsed(now), outage.last_status,
                                                       self.api_outage_timeout) from exc
                        if outage.should_log(now):
                            self.log.warning(
                                "Kubernetes API unreachable for %.0f s (%s); still watching JobSet %s/%s, which is "
                                "not touched (%s; api_outage_timeout %.0f s, %.0f s left)", outage.elapsed(now),
                                outage.last_status, self.namespace, self.name, self._api_name(),
                                self.api_outage_timeout, outage.remaining(now))
                            metrics.api_outage(metrics.trigger_tags(self), outage.failures, outage.elapsed(now))
                        if said_back is None or said_back.done():
                            said_back = asyncio.create_task(self._say_when_answered(api, outage, answers))
                        await asyncio.sleep(delay)
                        continue
                    await asyncio.sleep(self.poll_interval)  # the watch ended quietly: watch again from version
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # handed to run(): an Exception becomes an error event, others re-raise
                await queue.put(exc)
            finally:
                if said_back is not None:
                    said_back.cancel()

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

    async def _say_when_answered(self, api, outage: outages.OutageClock, answers_then: Any) -> None:
        """Log the outage's end when the api answers again, event or not: a re-opened watch of a quiet JobSet
        yields nothing, so the watch loop alone would say it only at the JobSet's next change."""
        while outage.ongoing:
            await asyncio.sleep(ANSWER_CHECK_S)
            answered = getattr(api, "failing_since", 0.0) is None and getattr(api, "answers", None) != answers_then
            if answered and outage.ongoing:
                self.log.info("%s answers again after %.0f s; watching JobSet %s/%s", self._api_name(),
                              outage.reset(self.clock()), self.namespace, self.name)
                return

    def _tick(self) -> float | None:
        watching = self._stall_watch() or self._pods_started is False
        ticks = [self.poll_interval] if watching else []
        if self._progress_enabled():
            ticks.append(float(self.progress_interval))
        if self.pod_logs:
            ticks.append(self.pod_logs_interval)
        return min(ticks) if ticks else None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # Off the triggerer's shared event loop: the target's hook and the clients' cold imports took 16-27 s in
        # one callback at load 10-12, which Airflow's watchdog reports as a deadlocked loop (adapters.kubernetes
        # AsyncKubernetesJobSetApi imports them when built; tests/triggers/test_trigger_event_loop.py)
        api = await asyncio.to_thread(self._api)
        self._live_since = self._watch_since = self.clock()
        self._pods_started = False if hasattr(api, "list_pods") else None
        restarts = self.restarts_seen
        state: JobSetState | None = None
        failed_rjob = ""
        looked_at = self.clock()
        async for item in self._events(api):
            if isinstance(item, BaseException) and not isinstance(item, Exception):
                raise item
            looked_at = self._say_if_resumed(looked_at)
            if isinstance(item, retry.ApiUnreachable):  # not the attempt's failure: the JobSet was not touched
                self.log.error("%s; JobSet %s/%s was not touched", item, self.namespace, self.name)
                yield self._event(events.API_UNREACHABLE, state, restarts, str(item))
                return
            if isinstance(item, Exception):
                yield self._event(events.ERROR, state, restarts, f"{type(item).__name__}: {item}")
                return
            if item is not None and item.type == "DELETED":
                yield self._event(events.DELETED, state, restarts, "the JobSet was deleted while being watched")
                return
            if item is not None:
                state = evaluate_jobset(item.obj)
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
                    from mtc_provider.triggers.attempt_end import end_retryable_attempt

                    # a plain retry ends here (no worker slot just to fail the try); anything else resumes the task
                    yield await end_retryable_attempt(self, state, restarts) or self._event(events.ENDED, state, restarts)
                    return
            if state is None and item is None and (self._stall_watch() or self._pods_started is False
                                                   or self._progress_enabled()):
                # A watch resumed from the operator's resourceVersion says nothing until the status changes;
                # a hung attempt may never change it, so read the JobSet once for the stall clock.
                with contextlib.suppress(Exception):
                    state = evaluate_jobset(await api.get(self.namespace, self.name))
            if state is not None and not state.terminating:
                problem = await self.check_pods(api)
                if problem:
                    yield self._event(problem[0], state, restarts, problem[1])
                    return
            if state is not None and self.checkpoint_dir and self.stall_timeout and not state.terminating:
                reason = await self.check_stall(state)
                if reason:
                    metrics.stalled(metrics.trigger_tags(self))
                    yield self._event(events.STALLED, state, restarts, reason)
                    return
                if self.listing_error:
                    yield self._event(events.LISTING_FAILED, state, restarts, self.listing_error)
                    return
            if state is not None and not state.terminating:
                await self.read_restores()
                await self.follow_pod_logs()
                await self.report_progress(restarts)

    def _say_if_resumed(self, looked_at: float) -> float:
        """Log when this watch looked at its JobSet again after a gap far above its cadence (a stopped or
        starved triggerer, its loop held, a metadata-database outage: docs/deployment.md); returns now."""
        now, tick = self.clock(), self._tick()
        gap = now - looked_at
        if tick is not None and gap > max(RESUMED_FACTOR * tick, RESUMED_MIN_S):
            self.log.warning("supervision resumed after %.0f s: JobSet %s/%s was not looked at since (one look is "
                             "due every %.0f s; the triggerer was stopped, starved or cut off from Airflow's "
                             "database meanwhile); its state is read now, and nothing was deleted", gap,
                             self.namespace, self.name, tick)
        return now

    async def on_kill(self) -> None:
        """The triggerer cancelled this watch "by user action": delete the JobSet only when Airflow confirms it.

        Airflow 3.3 also cancels a trigger that moved to another triggerer (a lapsed heartbeat) with the user's
        message (TriggerRunnerSupervisor.update_triggers -> TriggerRunner.cancel_triggers -> run_trigger,
        apache/airflow PR #73454), so ask the task instance's state now (core.attempt.ownership.kill_verdict): still
        deferred, running or cleared keeps the JobSet (the next try reattaches); marked or a deleted DAG run
        deletes it, with the reason.
        """
        from mtc_provider.adapters.kill_delete import adelete_within, handoff, trigger_budget
        from mtc_provider.adapters.task_state import atry_lookup
        from mtc_provider.core.attempt.ownership import describe_owner, kill_verdict

        where, started = f"{self.namespace}/{self.name}", time.monotonic()
        if not self.delete_on_kill:
            self.log.info("trigger cancelled: JobSet %s kept (delete_on_kill is off)", where)
            return
        ti = self.task_instance
        if ti is None:
            lookup, error, who = None, "the triggerer gave this trigger no task instance", "this task"
        else:
            owner = {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id,
                     "map_index": getattr(ti, "map_index", -1), "try_number": getattr(ti, "try_number", None)}
            who = describe_owner(owner)
            lookup, error = await atry_lookup(owner)
        verdict = kill_verdict(lookup, who, error)
        if not verdict.delete:
            self.log.warning("trigger cancelled: JobSet %s kept: %s. To stop the run yourself: kubectl delete "
                             "jobset -n %s %s", where, verdict.reason, self.namespace, self.name)
            return
        api = await asyncio.to_thread(self._api)
        if lookup is not None and lookup.state_name == "success" and await self._ended(api):
            # `success` is a user's mark or the try's own success (its trigger fired on another triggerer, this
            # stale copy is cancelled afterwards): an ended JobSet has nothing to stop either way, and the
            # run's teardown deletes it.
            self.log.info("trigger cancelled: JobSet %s kept: it has ended and %s succeeded; nothing to stop (the "
                          "run's teardown deletes it)", where, who)
            return
        self.log.warning("deleting JobSet %s (checkpoints are kept): %s", where, verdict.reason)
        failed = await adelete_within(lambda: api.delete(self.namespace, self.name, reason=DELETE_USER_KILL),
                                      trigger_budget(time.monotonic() - started))
        if failed:  # the lock stays too: the teardown releases it with the JobSet
            self.log.warning("%s", handoff(where, failed, self.namespace, self.name))
            return
        if verdict.run_over and ti is not None and self.extra.get("run_name"):
            await asyncio.to_thread(self._release_lock, ti)

    async def _ended(self, api, bound_s: float = 5.0) -> bool:
        """Whether the JobSet has ended (Completed or Failed), read once within `bound_s`; False when unknown."""
        try:
            return evaluate_jobset(await asyncio.wait_for(api.get(self.namespace, self.name), bound_s)).ended
        except Exception:  # noqa: BLE001 - unknown: the confirmed kill deletes, as before
            return False

    def _release_lock(self, ti) -> None:
        """The run is over for good (marked, or its DAG run deleted): free its run name (blocking; off the loop)."""
        from mtc_provider import targets
        from mtc_provider.adapters.run_lock import RunLock, lock_api
        from mtc_provider.core.basics import labels as L

        run_name, namespace = self.extra["run_name"], self.extra.get("namespace") or self.namespace
        try:
            api = targets.jobset_api(self.connection)
            lock = RunLock(lock_api(self.connection, api), namespace, run_name,
                           L.run_labels(ti.dag_id, ti.run_id, ti.task_id, run_name))
            lock.release()
            self.log.info("released run lock %s/%s", namespace, lock.name)
        except Exception as exc:  # noqa: BLE001 - the next run takes a stale lock over (or `mtc unlock`)
            self.log.warning("could not release the run lock of %s (%s); the next run takes it over once Airflow "
                             "shows this task ended, or run: mtc unlock %s -n %s", run_name, exc, run_name, namespace)


@dataclasses.dataclass
class StartClock:
    """One start of the pods: since when it waits, which restart attempt it is, and its pull errors."""

    since: float
    attempt: int | None
    pull_since: float | None = None
    first_pull_error: str = ""
    volume_events: list[str] = dataclasses.field(default_factory=list)  # the newest lines of core.attempt.pod_events


def _first_failure(api: Any, began: float, now: float) -> float:
    """When this run of failures began, on the trigger's clock: the api's first transient failure since it last
    answered (`failing_since`, wall time), else the start of the call that failed. A watch call lasts as long
    as the JobSet is quiet (hours): its start is no outage's start once the api says when it failed first."""
    since = getattr(api, "failing_since", None)
    if since is None:
        return began
    return max(began, now - max(0.0, time.time() - since))


def _bound(startup_timeout: float | None) -> str:
    return "no startup_timeout" if startup_timeout is None else f"startup_timeout {float(startup_timeout):.0f}s"


def _bucket(checkpoint_dir: str) -> str:
    return checkpoint_dir.split("/")[2] if checkpoint_dir.startswith("gs://") else checkpoint_dir


def describe_listing_error(exc: BaseException) -> str:
    """`HTTP 503 ServiceUnavailable: <message>` for an API answer; the exception type for a timeout or reset."""
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return f"HTTP {code} {type(exc).__name__}: {getattr(exc, 'message', exc)}"
    return f"{type(exc).__name__}: {exc} (no HTTP answer)"
