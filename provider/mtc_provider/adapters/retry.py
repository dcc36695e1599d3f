"""The provider's one retry policy, and the one function that maps HTTP errors to the exception hierarchy.

Client libraries bring their own retry defaults; adapters pass `retry=None` to them so that this policy
alone decides: 429/500/502/503/504 are retried a bounded number of times with exponential backoff and
jitter, everything else surfaces at once as a typed ApiError (403 names the permission that was needed).
"""

from __future__ import annotations

import json

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
    """429 or 5xx: worth another try after a wait."""


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an error from google-api-core, google-cloud-storage or the kubernetes client."""
    for attr in ("status", "code"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    return None


def map_error(exc: BaseException, permission: str = "", already_exists_on_409: bool = True) -> BaseException:
    """Turn a client library's HTTP error into our hierarchy; anything else is returned unchanged."""
    if isinstance(exc, ApiError):
        return exc
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
        return Retryable(status, message, "Retryable")
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


def policy(retry_types: tuple[type[BaseException], ...] = (Retryable,)) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """The tenacity decorator every adapter shares; read ATTEMPTS/INITIAL_WAIT at call time."""

    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> T:
            retrying = tenacity.Retrying(
                retry=tenacity.retry_if_exception_type(retry_types),
                stop=tenacity.stop_after_attempt(ATTEMPTS),
                wait=tenacity.wait_random_exponential(multiplier=INITIAL_WAIT, max=MAX_WAIT),
                before_sleep=tenacity.before_sleep_log(log, logging.WARNING),
                reraise=True,
            )
            return retrying(fn, *args, **kwargs)

        return wrapper

    return decorate
