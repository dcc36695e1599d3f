"""The provider's one exception hierarchy for bad input.

Every validation error names the field, the bad value and what is allowed, so a user can fix the
config without reading code. It is raised before any side effect.
"""

from __future__ import annotations

from typing import Any


class MtcError(Exception):
    """Base class for every error the provider raises on purpose."""


class SpecError(MtcError, ValueError):
    """A field of a run description has a value that is not allowed."""

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}: {value!r} is not allowed; allowed: {allowed}")


def require(condition: bool, field: str, value: Any, allowed: str) -> None:
    """Raise SpecError(field, value, allowed) unless the condition holds."""
    if not condition:
        raise SpecError(field, value, allowed)


def integer(field: str, value: Any, allowed: str, low: int = 0) -> int:
    """Return value as an int >= low (a rendered template's digits too), or raise naming the field."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)  # a rendered template is text
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SpecError(field, value, allowed)
    return value


def finite_number(field: str, value: Any, allowed: str, low: float | None = None, strict: bool = False) -> float:
    """Return value (a number or its text) as a finite float, >= `low` when given (> `low` when `strict`), or raise
    naming the field: bools, NaN and infinities are rejected."""
    try:
        number = float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError):
        number = float("nan")
    below = low is not None and (number < low or strict and number == low)
    if number != number or abs(number) == float("inf") or below:
        raise SpecError(field, value, allowed)
    return number


def positive_int(field: str, value: Any) -> int:
    """Return value as an int, or raise naming the field: bools and non-integers are rejected."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError(field, value, "a positive integer")
    return value


# --- GCP control plane --------------------------------------------------------------------------------


class NotReady(MtcError):
    """A cluster or the local machine fails readiness checks; `report` is the list of check dicts."""

    def __init__(self, message: str, report: list | None = None) -> None:
        self.report = report or []
        super().__init__(message)


class BucketNotUsable(MtcError):
    """A bucket exists but cannot hold MTC checkpoints (no HNS, wrong location, another project's)."""


class OperationFailed(MtcError):
    """A GKE long-running operation ended in error; the message carries the operation and its error."""


class CheckpointStalled(MtcError):
    """No new finalized checkpoint for longer than the stall timeout: the run is hung (a retryable failure)."""

    def __init__(self, checkpoint_dir: str, latest_step: int | None, waited_s: float, stall_timeout: float) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.latest_step = latest_step
        self.waited_s = waited_s
        self.stall_timeout = stall_timeout
        super().__init__(
            f"checkpoint progress stalled: no new finalized step in {checkpoint_dir} for {waited_s:.0f}s "
            f"(stall_timeout {stall_timeout:.0f}s); latest finalized step: {latest_step}"
        )
