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


def positive_int(field: str, value: Any) -> int:
    """Return value as an int, or raise naming the field: bools and non-integers are rejected."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError(field, value, "a positive integer")
    return value
