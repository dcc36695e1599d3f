"""Triggers with a scripted store and a scripted clock: no real sleeping."""

from __future__ import annotations

import pytest

from mtc_provider.adapters.checkpoint_stores import Newest
from mtc_provider.adapters.protocols import CheckpointInfo
from mtc_provider.triggers import checkpoint as module
from mtc_provider.triggers.checkpoint import (
    CheckpointAssetTrigger,
    CheckpointProgressEvent,
    CheckpointProgressTrigger,
)


class ScriptedClock:
    def __init__(self) -> None:
        self.t = 0.0
        self.sleeps = 0

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        if self.sleeps > 10_000:
            raise AssertionError("trigger never fired")
        self.t += seconds


class ScriptedStore:
    """Finalized steps that appear at given times: {step: commit_time}; `fail_until` makes listings raise."""

    def __init__(self, clock: ScriptedClock, commits: dict[int, float], fail_until: float = -1,
                 fail_from: float = 0) -> None:
        self.clock, self.commits, self.fail_until, self.fail_from = clock, commits, fail_until, fail_from
        self.calls: list[int | None] = []

    async def finalized(self, after: int | None = None) -> list[CheckpointInfo]:
        self.calls.append(after)
        if self.fail_from <= self.clock.t < self.fail_until:
            raise ConnectionError("listing refused")
        return [CheckpointInfo(s, f"/c/{s}", t) for s, t in sorted(self.commits.items())
                if t <= self.clock.t and (after is None or s > after)]

    async def newest(self, after: int | None = None) -> Newest:  # the progress trigger's one listing
        return Newest(tuple(await self.finalized(after)), None, None, after)


@pytest.fixture
def clock(monkeypatch):
    scripted = ScriptedClock()
    monkeypatch.setattr(module, "clock", scripted)
    return scripted


def use_store(monkeypatch, store) -> None:
    monkeypatch.setattr(module, "open_async_store", lambda checkpoint_dir, gcp_conn_id, *args: store)


async def first_event(trigger) -> CheckpointProgressEvent:
    async for event in trigger.run():
        return CheckpointProgressEvent.from_payload(event.payload)
    raise AssertionError("no event")


def progress_trigger(**kwargs) -> CheckpointProgressTrigger:
    values = {"checkpoint_dir": "/c", "target_step": 1000, "stall_timeout": 100, "poll_interval": 30, "started_at": 0.0}
    return CheckpointProgressTrigger(**{**values, **kwargs})


async def test_hung_run_is_reported_within_stall_timeout_plus_one_poll(clock, monkeypatch):
    use_store(monkeypatch, ScriptedStore(clock, {10: 5.0, 20: 40.0}))  # then nothing: hung
    event = await first_event(progress_trigger())
    assert event.status == "stalled"
    # Last progress seen at t=60 (the poll after step 20's commit); reported at the first poll past 160.
    assert 60 + 100 < clock.t <= 60 + 100 + 30
    assert event.progress.latest_step == 20 and event.new_checkpoints == [(10, 5.0), (20, 40.0)]
    assert "no new finalized checkpoint" in event.message and "latest step 20" in event.message


async def test_slow_but_progressing_run_is_not_stalled(clock, monkeypatch):
    # A checkpoint every 95 s (just under the 100 s stall timeout) until the target.
    use_store(monkeypatch, ScriptedStore(clock, {100 * i: 95.0 * i for i in range(1, 11)}))
    event = await first_event(progress_trigger(poll_interval=5))
    assert event.status == "reached" and event.progress.latest_step == 1000
    assert event.progress.steps_per_hour == pytest.approx(100 * 3600 / 95)
    assert len(event.new_checkpoints) == 10


async def test_listing_errors_are_not_no_progress_and_a_lasting_outage_says_so(clock, monkeypatch):
    use_store(monkeypatch, ScriptedStore(clock, {}, fail_until=10_000))
    event = await first_event(progress_trigger(listing_timeout=600))
    assert event.status == "listing_failed" and 600 < clock.t <= 630  # not "stalled" at 100 s
    assert "kept failing for" in event.message and "ConnectionError: listing refused" in event.message


async def test_the_stall_clock_is_paused_while_listings_fail(clock, monkeypatch):
    # Step 10 seen at t=0; listings fail from t=30 until t=300; nothing new afterwards.
    store = ScriptedStore(clock, {10: 0.0}, fail_from=30, fail_until=300)
    use_store(monkeypatch, store)
    event = await first_event(progress_trigger(listing_timeout=600))
    # The 270 s of failing listings are taken off the clock: without them the stall comes at t=100 + 270.
    assert event.status == "stalled" and 370 < clock.t <= 370 + 30


async def test_trigger_asks_only_for_newer_steps(clock, monkeypatch):
    store = ScriptedStore(clock, {10: 0.0, 20: 40.0, 1000: 70.0})
    use_store(monkeypatch, store)
    event = await first_event(progress_trigger())
    assert event.status == "reached"
    assert store.calls == [None, 10, 10, 20]


def test_progress_trigger_serializes_primitives_only():
    classpath, kwargs = progress_trigger(gcp_conn_id="c").serialize()
    assert classpath == "mtc_provider.triggers.checkpoint.CheckpointProgressTrigger"
    assert CheckpointProgressTrigger(**kwargs).serialize() == (classpath, kwargs)
    assert all(isinstance(v, (str, int, float, type(None))) for v in kwargs.values())


def test_the_gke_triggers_serialize_every_argument_and_rebuild_the_same():
    """Airflow rebuilds a trigger in the triggerer from serialize()'s kwargs alone: each argument must be in them."""
    from mtc_provider.triggers.gcp import ClusterReadinessTrigger, GkeOperationTrigger

    target = {"project_id": "p", "location": "l", "cluster_name": "c"}
    for trigger in (GkeOperationTrigger("op-1", target, api_endpoint="e", poll_interval=3.0),
                    ClusterReadinessTrigger(target, {"tpu_type": "v6e"}, 123.0, sizing={"parameters": 7},
                                            checkpoint_configuration_name="cc", api_endpoint="e", poll_interval=4.0,
                                            bucket_name="b", capacity=["spot", ""])):
        classpath, kwargs = trigger.serialize()
        assert classpath == f"mtc_provider.triggers.gcp.{type(trigger).__name__}"
        assert type(trigger)(**kwargs).serialize() == (classpath, kwargs)
        assert "poll_interval" in kwargs and kwargs["api_endpoint"] == "e"


class StateStore:
    def __init__(self) -> None:
        self.data: dict = {}

    async def aget(self, key, default=None):
        return self.data.get(key, default)

    async def aset(self, key, value):
        self.data[key] = value


async def take(trigger, count: int) -> list[int]:
    steps = []
    async for event in trigger.run():
        steps.append(event.payload["step"])
        if len(steps) == count:
            return steps
    return steps


async def test_asset_trigger_emits_each_new_checkpoint_once(clock, monkeypatch):
    use_store(monkeypatch, ScriptedStore(clock, {1: 0.0, 2: 0.0, 3: 0.0, 4: 30.0, 5: 31.0, 6: 200.0}))
    state = StateStore()
    trigger = CheckpointAssetTrigger(checkpoint_dir="/c", run_name="r", poll_interval=30)
    trigger.asset_state_store = state
    # First start: only the newest existing checkpoint, then each new one as it appears.
    assert await take(trigger, 3) == [3, 4, 5]
    assert state.data == {"last_step": 5}
    # A triggerer restart resumes from the watermark: nothing is announced twice.
    restarted = CheckpointAssetTrigger(**trigger.serialize()[1])
    restarted.asset_state_store = state
    assert await take(restarted, 1) == [6]


async def test_asset_event_payload(clock, monkeypatch):
    use_store(monkeypatch, ScriptedStore(clock, {7: 12.5}))
    trigger = CheckpointAssetTrigger(checkpoint_dir="/c", run_name="r", poll_interval=30)
    async for event in trigger.run():
        assert event.payload == {"step": 7, "commit_time": 12.5, "run_name": "r", "checkpoint_dir": "/c", "path": "/c/7"}
        break
