"""A user's kill that arrives after the trigger created attempt N+1 but before anything follows it
(triggers.next_in_try: create, then record, then follow) stops N+1 too (triggers.kill).

Without the sweep, on_kill deleted only the JobSet it followed (attempt N): N+1 trained on, watched by no one,
holding its TPUs. The kill now lists this task's JobSets by their labels (run, task and try exactly) and deletes
every live attempt of the try, each delete logged with who asked. Over the in-memory cluster of
tests/triggers/test_next_in_try.py (tests/doubles/memory_jobset.py: a list selects by label selector, a delete is
foreground, as the API server does: https://kubernetes.io/docs/reference/using-api/api-concepts/).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time

import pytest

from mtc_provider.adapters.retry import Retryable
from mtc_provider.core.basics import labels as L
from mtc_provider.core.basics.vocabulary import DELETE_USER_KILL
from mtc_provider.triggers import next_in_try
from tests.triggers.test_next_in_try import _said, run  # noqa: F401 - the fixture: one try on its own cluster
from tests.doubles.memory_jobset import status_completed, status_running
from tests.support.js_helpers import reach

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def marked_failed(monkeypatch):
    """Airflow confirms the kill: the task instance was marked failed (core.attempt.ownership.kill_verdict)."""
    from mtc_provider.adapters import task_state
    from mtc_provider.core.attempt.ownership import TaskLookup

    async def lookup(owner):
        return TaskLookup(True, "failed"), ""

    monkeypatch.setattr(task_state, "atry_lookup", lookup)


def _kill_in_the_window(r, monkeypatch, before_kill=lambda: None, after_kill=lambda: None):
    """The trigger runs until it has created attempt 2 and is still opening its record (`_adopt` held); then the
    triggerer's on_kill. Returns (attempt 1, attempt 2, seconds the on_kill took)."""
    held = asyncio.Event()

    async def opening_the_record(*args, **kwargs):
        await held.wait()  # the kill comes before the trigger follows attempt 2

    monkeypatch.setattr(next_in_try, "_adopt", opening_the_record)
    trigger = r.defer()
    took = []

    async def scenario():
        task = asyncio.ensure_future(trigger.run().__anext__())
        for _ in range(1000):
            await asyncio.sleep(0.01)
            if len(r.cluster.created) == 2:
                break
        assert len(r.cluster.created) == 2 and trigger._following is None
        before_kill()
        began = time.monotonic()
        await trigger.on_kill()
        took.append(time.monotonic() - began)
        after_kill()  # a hung request answers at last: the test's loop can close
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    first, second = r.cluster.created[:2]
    return first, second, took[0]


def _scripts(tmp_path):
    # attempt 1 is preempted after progress (10 -> 40); attempt 2 would train on
    return [[status_running(), reach(tmp_path, 40, status_completed())], [status_running()] * 50]


def _another(r, source, name, **labels):
    """A JobSet like `source` under `name` with some labels changed (another try's, another task's)."""
    body = copy.deepcopy(r.cluster.get("default", source))
    body["metadata"] = {"name": name, "labels": {**body["metadata"]["labels"], **labels}}
    body.pop("status", None)
    r.cluster.create("default", body)


def test_a_kill_between_the_create_and_the_follow_stops_the_new_attempt(run, marked_failed, monkeypatch, tmp_path,
                                                                        caplog, capsys):
    r = run(_scripts(tmp_path))
    with caplog.at_level(logging.INFO):
        first, second, _ = _kill_in_the_window(r, monkeypatch)
    assert second not in r.cluster.live(), "attempt 2 trains on, watched by no one"
    assert (second, DELETE_USER_KILL) in r.cluster.delete_reasons
    said = _said(capsys, caplog)
    assert any(f"deleting JobSet default/{second}" in m and "asked by a confirmed user action: on_kill of try 1" in m
               for m in said), said


def test_another_try_s_jobset_is_never_deleted(run, marked_failed, monkeypatch, tmp_path):
    r = run(_scripts(tmp_path))
    other_try = "llama-other-try"

    def another_try_runs():
        _another(r, r.cluster.created[1], other_try, **{L.TRY_NUMBER: "2", L.ATTEMPT: "1"})

    first, second, _ = _kill_in_the_window(r, monkeypatch, another_try_runs)
    assert second not in r.cluster.live()
    assert other_try in r.cluster.live()
    assert other_try not in [name for name, _ in r.cluster.delete_reasons]


def test_another_task_s_jobset_is_never_deleted(run, marked_failed, monkeypatch, tmp_path):
    """Another task's live JobSet of the same run name and try number: its task label differs, it stays."""
    r = run(_scripts(tmp_path))
    other_task = "llama-other-task"

    def another_task_runs():
        _another(r, r.cluster.created[1], other_task, **{L.TASK_ID: "other"})

    first, second, _ = _kill_in_the_window(r, monkeypatch, another_task_runs)
    assert second not in r.cluster.live()
    assert other_task in r.cluster.live()
    assert other_task not in [name for name, _ in r.cluster.delete_reasons]


def test_a_failing_listing_still_deletes_the_known_attempt_and_says_what_it_did_not_check(
        run, marked_failed, monkeypatch, tmp_path, caplog, capsys):
    r = run(_scripts(tmp_path))

    def api_fails():
        def refuse(namespace, label_selector):
            raise Retryable("503 Service Unavailable")
        monkeypatch.setattr(r.cluster, "list", refuse)

    with caplog.at_level(logging.INFO):
        first, second, _ = _kill_in_the_window(r, monkeypatch, api_fails)
    assert (first, DELETE_USER_KILL) in r.cluster.delete_reasons
    said = _said(capsys, caplog)
    assert any("could not list the other attempts of try 1" in m and "503" in m
               and f"kubectl delete jobset -n default -l " in m for m in said), said


def test_a_listing_that_never_answers_does_not_hold_the_kill(run, marked_failed, monkeypatch, tmp_path, caplog,
                                                             capsys):
    """A request that never answers: the kill gives up on the listing within its share of on_kill_timeout."""
    monkeypatch.setenv("AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT", "11")  # budget 11 - 5 = 6 s, the listing's 2 s
    r = run(_scripts(tmp_path))
    never = threading.Event()

    def api_hangs():
        def hang(namespace, label_selector):
            never.wait(60)
            return []
        monkeypatch.setattr(r.cluster, "list", hang)

    with caplog.at_level(logging.INFO):
        first, second, took = _kill_in_the_window(r, monkeypatch, api_hangs, never.set)
    assert took < 5, took
    assert (first, DELETE_USER_KILL) in r.cluster.delete_reasons
    assert any("could not list the other attempts of try 1 (no answer within 2 s)" in m
               for m in _said(capsys, caplog))
