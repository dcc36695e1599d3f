"""The outage budget: how long an unreachable API is waited out, how long each wait is, when to say so.

An unreachable control plane (a zonal GKE cluster's single control plane during its upgrade, a load balancer that
answers 503, connections refused or hanging) is not a failure of the training attempt: the JobSet keeps running.
Callers keep trying with capped exponential backoff that honours the server's `Retry-After` (RFC 9110 section
10.2.3; the Kubernetes API sends it with 429 and 503, https://kubernetes.io/docs/concepts/cluster-administration/
flow-control/), for at most `timeout` seconds of continuous unreachability, logging every `log_interval` seconds.

Pure: the caller passes the clock readings in and does the sleeping and the logging.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mtc_provider.core.basics.errors import SpecError

DEFAULT_TIMEOUT = 3600.0  # a zonal control plane upgrade takes minutes to tens of minutes: wait out an hour
DEFAULT_LOG_INTERVAL = 180.0
DEFAULT_MAX_BACKOFF = 60.0
RETRY_AFTER_CAP = 300.0  # a Retry-After beyond this is read as "a while", not obeyed to the letter


def validate(field_name: str, value: object, minimum: float = 0.0) -> float:
    """A number of seconds >= minimum, or a SpecError naming the field and the value."""
    try:
        seconds = float(value)  # templated values arrive as text
    except (TypeError, ValueError):
        seconds = None
    if seconds is None or isinstance(value, bool) or seconds < minimum or seconds != seconds:
        raise SpecError(field_name, value, f"a number of seconds >= {minimum:g}")
    return seconds


@dataclass
class OutageClock:
    """One run of consecutive failures to reach an API; `reset()` when it answers again."""

    timeout: float = DEFAULT_TIMEOUT
    max_backoff: float = DEFAULT_MAX_BACKOFF
    log_interval: float = DEFAULT_LOG_INTERVAL
    since: float | None = None  # first failure of this outage
    failures: int = 0
    last_status: str = ""  # "HTTP 503" / "no HTTP answer (ConnectError ...)"
    _logged_at: float | None = field(default=None, repr=False)
    _last: float | None = field(default=None, repr=False)  # latest failure

    @property
    def ongoing(self) -> bool:
        return self.since is not None

    def reset(self, now: float | None = None) -> float:
        """The API answered (at `now`): end the outage; returns how long it lasted, from the start of the first
        failing call to the answer (0 when there was none). Without `now`, up to the last failure only: shorter
        than the outage by the last wait and the call that answered."""
        end = now if now is not None else self._last
        lasted = 0.0 if self.since is None or end is None else max(0.0, end - self.since)
        self.since, self.failures, self.last_status, self._logged_at = None, 0, "", None
        return lasted

    def failed(self, now: float, status: str, retry_after: float | None = None, started: float | None = None) -> float:
        """Record a failure at `now` of a call that began at `started` (default `now`); the seconds to wait
        before the next try.

        The outage begins when its first failing call began, not when that call gave up: a call retries inside
        (the adapters' retry policy, up to a minute of its own back-off) before it reports a failure here, and an
        outage measured from its end is logged as "unreachable for 0 s" after a minute without answers."""
        if self.since is None:
            self.since = now if started is None else min(started, now)
        self._last = now
        self.failures += 1
        self.last_status = status
        backoff = min(self.max_backoff, min(1.0, self.max_backoff) * 2 ** (self.failures - 1))
        if retry_after is not None and retry_after > 0:
            backoff = max(backoff, min(retry_after, RETRY_AFTER_CAP))  # the server knows when it is back
        return max(0.0, min(backoff, self.remaining(now)))

    def elapsed(self, now: float) -> float:
        return 0.0 if self.since is None else now - self.since

    def remaining(self, now: float) -> float:
        return max(0.0, self.timeout - self.elapsed(now))

    def exhausted(self, now: float) -> bool:
        return self.since is not None and self.elapsed(now) >= self.timeout

    def should_log(self, now: float) -> bool:
        """True on the first failure and then every log_interval."""
        if self._logged_at is None or now - self._logged_at >= self.log_interval:
            self._logged_at = now
            return True
        return False
