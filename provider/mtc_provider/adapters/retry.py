"""The provider's one retry policy, and the one function that maps HTTP errors to the exception hierarchy.

Client libraries bring their own retry defaults; adapters pass `retry=None` to them so that this policy
alone decides: 429/500/502/503/504 are retried a bounded number of times with exponential backoff and
jitter, everything else surfaces at once as a typed ApiError (403 names the permission that was needed).
"""

from __future__ import annotations

import json
import re

import functools
import logging
from typing import Any, Callable, TypeVar

import tenacity

from mtc_provider.adapters.protocols import AlreadyExists, ApiError, NotFound

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
# Bounded: at most ATTEMPTS tries, waits 0.5 s, 1 s, 2 s ... capped at MAX_WAIT (tests shrink these).
ATTEMPTS = 5
INITIAL_WAIT = 0.5
MAX_WAIT = 20.0


class Unauthorized(ApiError):
    def __init__(self, message: str = "") -> None:
        super().__init__(401, message, "Unauthorized")


class PermissionDenied(ApiError):
    """403: the message names the IAM permission the call needed, not just the server's text."""

    def __init__(self, message: str = "", permission: str = "") -> None:
        self.permission = permission
        text = f"missing permission {permission}: {message}" if permission else message
        super().__init__(403, text, "PermissionDenied")


class Conflict(ApiError):
    """409 that is not "already exists": a stale resourceVersion or a concurrent IAM change."""

    def __init__(self, message: str = "") -> None:
        super().__init__(409, message, "Conflict")


class PreconditionFailed(ApiError):
    def __init__(self, message: str = "") -> None:
        super().__init__(412, message, "PreconditionFailed")


class Retryable(ApiError):
    """429 or 5xx, or no HTTP answer at all (status 0): worth another try after a wait.

    `retry_after` is the server's Retry-After in seconds (RFC 9110 section 10.2.3), None when it sent none.
    """

    def __init__(self, status: int, message: str = "", reason: str = "", retry_after: float | None = None) -> None:
        super().__init__(status, message, reason)
        self.retry_after = retry_after


class ApiUnreachable(ApiError):
    """An API kept failing (429, 5xx, no answer) for a whole outage budget. Not an attempt failure: the JobSet
    was not touched, and a later try (or a cleared task) reattaches to it."""

    def __init__(self, api: str, seconds: float, last: str, budget: float) -> None:
        self.api, self.seconds, self.last, self.budget = api, seconds, last, budget
        super().__init__(0, "", "ApiUnreachable")
        self.args = (f"{api} unreachable for {seconds:.0f} s (last: {last}; api_outage_timeout {budget:.0f} s)",)


def describe_failure(exc: BaseException) -> str:
    """`HTTP 503` for an API answer, `no HTTP answer (ClientConnectorError ...)` when none came."""
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status > 0:
        return f"HTTP {status}"
    return f"no HTTP answer ({str(exc).split(': ', 1)[-1][:200]})"


def retry_after_of(exc: BaseException) -> float | None:
    """Seconds from a Retry-After header (delay-seconds or an HTTP-date), None when absent or unreadable."""
    value = getattr(exc, "retry_after", None)
    if isinstance(value, (int, float)):
        return float(value)
    headers = getattr(exc, "headers", None)
    raw = None
    if headers:
        try:
            raw = headers.get("Retry-After") or headers.get("retry-after")
        except AttributeError:
            raw = None
    if not raw:
        return None
    raw = str(raw).strip()
    if raw.isdigit():
        return float(raw)
    try:
        from email.utils import parsedate_to_datetime
        import time

        return max(0.0, parsedate_to_datetime(raw).timestamp() - time.time())
    except (TypeError, ValueError, IndexError):
        return None


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an error from google-api-core, google-cloud-storage or the kubernetes client.
    google-cloud-storage's own InvalidResponse (media uploads and downloads) keeps it on its `response`."""
    for attr in ("status", "code"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    value = getattr(getattr(exc, "response", None), "status_code", None)
    return value if isinstance(value, int) else None


_CODE_RE = re.compile(r'(?:"code"\s*:\s*|[Ss]tatus:?\s*|HTTP\s+)(?P<code>[1-5]\d\d)\b')
_REFUSED = ("invalid_grant", "permission_denied", "denied", "unauthorized_client", "invalid_client")


def identity_error(exc: BaseException) -> ApiError | None:
    """A failed token mint (google.auth: IAM Credentials for an impersonation chain, the metadata server for Workload
    Identity, STS) as the provider's hierarchy: an outage of the identity service is Retryable, like an API outage
    (bounded by the same outage budget); a refusal (400/401/403, invalid_grant, a denied permission) is a
    PermissionDenied, like a 403. None: not a google.auth error. google.auth raises RefreshError with the service's
    answer in its text (impersonated_credentials `_make_iam_token_request`, compute_engine `_metadata`), and
    TransportError when no answer came."""
    if not type(exc).__module__.startswith("google.auth"):
        return None
    text = f"{type(exc).__name__}: {exc}"[:500]
    match = _CODE_RE.search(text)
    code = int(match.group("code")) if match else 0
    if type(exc).__name__ in ("TransportError", "TimeoutError") or getattr(exc, "retryable", False):
        return Retryable(code if code >= 500 or code == 429 else 0, f"minting a token failed: {text}",
                         "TokenUnavailable")
    if code in (400, 401, 403) or any(marker in text.lower() for marker in _REFUSED):
        return PermissionDenied(f"minting a token was refused: {text}")
    return Retryable(code if code >= 500 or code == 429 else 0, f"minting a token failed: {text}", "TokenUnavailable")


def map_error(exc: BaseException, permission: str = "", already_exists_on_409: bool = True) -> BaseException:
    """Turn a client library's HTTP error into our hierarchy; anything else is returned unchanged."""
    if isinstance(exc, ApiError):
        return exc
    identity = identity_error(exc)
    if identity is not None:
        return identity
    status = status_of(exc)
    if status is None:
        return exc
    message = _message(exc)
    if status == 401:
        return Unauthorized(message)
    if status == 403:
        return PermissionDenied(message, permission)
    if status == 404:
        return NotFound(message)
    if status == 409:
        return AlreadyExists(message) if already_exists_on_409 and "already" in message.lower() else Conflict(message)
    if status == 412:
        return PreconditionFailed(message)
    if status in RETRYABLE_STATUSES:
        return Retryable(status, message, "Retryable", retry_after_of(exc))
    return ApiError(status, message)


def _message(exc: BaseException) -> str:
    body = getattr(exc, "body", None)  # kubernetes ApiException keeps the Status JSON here
    if body:
        try:
            status = json.loads(body)
        except (TypeError, ValueError):
            status = None
        if isinstance(status, dict) and status.get("kind") == "Status" and status.get("message"):
            return str(status["message"])[:500]  # the API server's own sentence, naming the object and field
        return str(body)[:500]
    return str(getattr(exc, "message", "") or exc)[:500]


def call(fn: Callable[..., T], *args: Any, permission: str = "", retry_on: tuple[type[BaseException], ...] = (),
         **kwargs: Any) -> T:
    """Call fn with the retry policy; errors come out mapped. `retry_on` adds types (e.g. Conflict for IAM)."""
    retry_types = (Retryable, *retry_on)

    def attempt() -> T:
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - mapped and re-raised
            mapped = map_error(exc, permission)
            if mapped is exc:
                raise
            raise mapped from exc

    return policy(retry_types)(attempt)()


def wait_honouring_retry_after(initial: float, maximum: float) -> Any:
    """Exponential backoff with jitter, but never shorter than the server's Retry-After (capped at `maximum`)."""
    backoff = tenacity.wait_random_exponential(multiplier=initial, max=maximum)

    def wait(state: tenacity.RetryCallState) -> float:
        delay = backoff(state)
        exc = state.outcome.exception() if state.outcome else None
        after = retry_after_of(exc) if exc is not None else None
        return max(delay, min(after, maximum)) if after else delay

    return wait


def policy(retry_types: tuple[type[BaseException], ...] = (Retryable,)) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """The tenacity decorator every adapter shares; read ATTEMPTS/INITIAL_WAIT at call time."""

    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> T:
            retrying = tenacity.Retrying(
                retry=tenacity.retry_if_exception_type(retry_types),
                stop=tenacity.stop_after_attempt(ATTEMPTS),
                wait=wait_honouring_retry_after(INITIAL_WAIT, MAX_WAIT),
                before_sleep=tenacity.before_sleep_log(log, logging.DEBUG),  # OutageClock logs outages
                reraise=True,
            )
            return retrying(fn, *args, **kwargs)

        return wrapper

    return decorate


def through_listing_outage(list_fn: Callable[[], T], what: str, budget: float, logger: Any = log) -> T:
    """`list_fn()`, retried while it fails (GCS 503 or 429, a reset, a timeout: the storage's trouble, not the
    attempt's) for up to `budget` seconds of failing, as the trigger's listing does (its listing_timeout), with
    backoff that honours Retry-After; then the last error. A 401, 403 or 404 is no outage: it surfaces at once."""
    def transient(exc: BaseException) -> bool:
        return status_of(exc) not in (401, 403, 404) and isinstance(exc, Exception) and not _airflow_failure(exc)

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(transient),
        stop=tenacity.stop_after_delay(budget),
        wait=wait_honouring_retry_after(INITIAL_WAIT, MAX_WAIT),
        before_sleep=lambda state: logger.warning(
            "listing %s failed (%s); retrying for up to %.0f s (listing_timeout): a listing outage is not a failed "
            "attempt", what, _short(state.outcome.exception()), budget),
        reraise=True,
    )
    return retrying(list_fn)


def _airflow_failure(exc: BaseException) -> bool:
    return any(c.__name__ in ("AirflowException", "AirflowFailException") for c in type(exc).__mro__)


def _short(exc: BaseException | None) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}" if exc is not None else "?"
