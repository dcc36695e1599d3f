"""A trigger builds its blocking JobSet client (MtcJobSetHook) once, off the event loop, and every step of an
attempt's end shares it: the status read, the record's close, the delete and the wait until the JobSet is gone, the
run lock's reads, the next attempt's create, its record, the ended attempts' delete, and the attempt it follows
(triggers.attempt_end `sync_hook`). Each build is a kubeconfig load, on GKE a token; a step with its own outage bound
(the create) shares the client too (adapters.kubernetes `waiting_out`).

Over the in-memory JobSet cluster, the launch operator's own trigger (tests/triggers/test_next_in_try.py `Run`).
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from mtc_provider.core.attempt.jobset_events import ENDED, JobSetEvent
from mtc_provider.core.basics.vocabulary import DELETE_ATTEMPT_ENDED, DELETE_ATTEMPT_FAILED
from mtc_provider.hooks.jobset import MtcJobSetHook
from tests.triggers.test_next_in_try import Run, _preempted_then_target
from tests.triggers.test_stall_in_trigger import STALL, _stalled_then_target

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def built(monkeypatch):
    """The threads the real hook class was constructed in, one entry per construction."""
    threads: list[str] = []
    real = MtcJobSetHook.__init__

    def counting(self, *args, **kwargs):
        threads.append(threading.current_thread().name)
        real(self, *args, **kwargs)

    monkeypatch.setattr(MtcJobSetHook, "__init__", counting)
    return threads


@pytest.mark.parametrize("path, scripts, overrides", [
    ("stall", _stalled_then_target, STALL),  # status, close, delete, wait gone, lock, create, open, delete ended
    ("preemption", _preempted_then_target, {}),  # close, lock, create, open, delete ended
])
def test_an_attempts_end_in_the_trigger_builds_one_client_off_the_loop(tmp_path, monkeypatch, built, path, scripts,
                                                                       overrides):
    r = Run(tmp_path, monkeypatch, scripts(tmp_path), **overrides)
    try:
        trigger = r.defer()
        built.clear()  # the operator's own hook, on the worker
        (event,) = asyncio.run(r.events(trigger))
    finally:
        r.close()
    ev = JobSetEvent.from_payload(event.payload)
    assert ev.kind == ENDED and ev.extra["attempt"] == 2 and ev.verdict["kind"] == "succeed", ev
    first, second = r.cluster.created  # attempt 2 created from the triggerer, and followed to its end
    assert first.endswith("-a1") and second.endswith("-a2")
    reason = DELETE_ATTEMPT_FAILED if path == "stall" else DELETE_ATTEMPT_ENDED
    assert r.cluster.delete_reasons == [(first, reason)]
    assert len(built) == 1, built  # one client for the whole end and the attempt it follows
    assert built[0] != threading.main_thread().name  # built off the triggerer's event loop
