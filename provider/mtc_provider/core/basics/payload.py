"""Dataclasses that cross a process boundary as JSON: a trigger's event payload, an XCom."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, Mapping, TypeVar

T = TypeVar("T", bound="Payload")


class Payload:
    """`to_payload`/`from_payload` for a dataclass of JSON values. A key the class does not know is left out, so a
    payload written by a newer release (a triggerer upgraded before its workers) still loads."""

    def to_payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls: type[T], data: Mapping[str, Any]) -> T:
        names = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in names})
