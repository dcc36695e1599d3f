"""core.basics.payload: the JSON form of the dataclasses a trigger event or an XCom carries."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from mtc_provider.core.basics.payload import Payload


@dataclass(frozen=True)
class Event(Payload):
    status: str
    checks: list[dict] = field(default_factory=list)


def test_a_payload_round_trips_and_a_key_from_a_newer_release_is_left_out():
    event = Event("ready", [{"name": "a", "ok": True}])
    assert Event.from_payload(event.to_payload()) == event
    assert Event.from_payload({"status": "ready", "added_later": 1}) == Event("ready")


def test_a_missing_required_key_is_refused():
    with pytest.raises(TypeError, match="status"):
        Event.from_payload({"checks": []})
