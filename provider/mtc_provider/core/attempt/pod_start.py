"""When the start of an attempt's pods ends the attempt, and what its wait says (pure; the trigger lists the pods).

Each start of the pods (the first, and each in-cluster restart: a new restart-attempt label) has its own clock. What
cannot heal (InvalidImageName, a missing Secret/ConfigMap) ends the attempt at once with the pod's own message; pull
and create errors the kubelet retries end it after `image_pull_timeout`; `startup_timeout` bounds the whole start.
Every `capacity_log_interval` a line says what waits: capacity, the pull error, or what Kubernetes says about
scheduled pods that wait (their volume events, core.attempt.pod_events: an MTC ramdisk that cannot be mounted).
"""

from __future__ import annotations

import dataclasses

from mtc_provider.core.attempt.jobset_events import STARTUP_TIMEOUT, UNSTARTABLE
from mtc_provider.core.attempt.status import PodsState

End = tuple[str, str] | None  # (event kind, message)


@dataclasses.dataclass
class StartClock:
    """One start of the pods: since when it waits, which restart attempt it is, and its pull errors."""

    since: float
    attempt: int | None
    pull_since: float | None = None
    first_pull_error: str = ""
    volume_events: list[str] = dataclasses.field(default_factory=list)  # the newest lines of core.attempt.pod_events


@dataclasses.dataclass
class PodStart:
    """The clocks of the starts of one attempt's pods."""

    startup_timeout: float | None
    image_pull_timeout: float | None
    capacity_log_interval: float
    start: StartClock | None = None  # the current start (None: all running, or not seen yet)
    logged_at: float = float("-inf")
    _log_now: bool = dataclasses.field(default=False, init=False, repr=False)  # a waiting line is due now

    def check(self, pods: PodsState, now: float, where: str) -> tuple[End, list[str]]:
        """The end this listing decides, if any, and the lines to log; then `wants_events` and `waited`."""
        if self.start is None or self.start.attempt != pods.restart_attempt:
            self.start = StartClock(since=now, attempt=pods.restart_attempt)  # a new start of the pods
        start = self.start
        if pods.permanent_error:
            return (UNSTARTABLE, f"a pod of {where} can never start: {pods.permanent_error}"), []
        if pods.all_started:
            self.start = None
            return None, []
        self._log_now = log_now = now - self.logged_at >= self.capacity_log_interval
        if pods.healing_error:
            start.pull_since = now if start.pull_since is None else start.pull_since
            start.first_pull_error = start.first_pull_error or pods.healing_error
            waited = now - start.pull_since
            bound = ("no bound" if self.image_pull_timeout is None
                     else f"image_pull_timeout {float(self.image_pull_timeout):.0f}s")
            if self.image_pull_timeout is not None and waited > float(self.image_pull_timeout):
                first = "" if start.first_pull_error == pods.healing_error else f" (first: {start.first_pull_error})"
                return (UNSTARTABLE, f"the pods of {where} could not pull their image or create their container for "
                                     f"{waited:.0f}s ({bound}): {pods.healing_error}{first}"), []
            if log_now:
                self.logged_at = now
                return None, [f"{where}: waiting for the image pull / container creation for {waited:.0f}s ({bound}; "
                              f"Kubernetes retries with back-off): {pods.healing_error}"]
        elif pods.scheduled < pods.total and log_now:
            self.logged_at = now
            return None, [f"{where} {pods.capacity_line()}"]
        return None, []

    def _timed_out(self, now: float) -> bool:
        return self.startup_timeout is not None and now - self.start.since > float(self.startup_timeout)

    def wants_events(self, pods: PodsState, now: float) -> bool:
        """Whether the volume events of the scheduled pods that wait are wanted now (for a line, or a timeout)."""
        return bool(self.start is not None and pods.scheduled and (self._log_now or self._timed_out(now)))

    def waited(self, pods: PodsState, now: float, where: str, volume_events: list[str] | None) -> tuple[End, list[str]]:
        """After `check` (when it ended nothing): `volume_events` as listed now (None: not listed)."""
        start, lines = self.start, []
        if volume_events is not None:
            start.volume_events = volume_events or start.volume_events
            if self._log_now and not pods.healing_error and pods.scheduled == pods.total:
                bound = "no startup_timeout" if self.startup_timeout is None else \
                    f"startup_timeout {float(self.startup_timeout):.0f}s"
                lines.append(f"{where}: waiting for the pods to start for {now - start.since:.0f}s ({bound}): "
                             f"{pods.waiting_line()}; Kubernetes events: "
                             f"{'; '.join(start.volume_events) or 'no volume events'}")
                self.logged_at = now
        if self._timed_out(now):
            said = f"; Kubernetes events: {'; '.join(start.volume_events)}" if start.volume_events else ""
            return (STARTUP_TIMEOUT, f"{where} did not start within startup_timeout {float(self.startup_timeout):.0f}s "
                                     f"(pods of restart attempt {pods.restart_attempt or 0}): "
                                     f"{pods.waiting_line()}{said}"), lines
        return None, lines
