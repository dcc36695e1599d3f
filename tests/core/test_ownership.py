"""core.attempt.ownership.foreign_event: whether the event Airflow resumed a try with is that try's trigger's."""

from __future__ import annotations

from mtc_provider.core.attempt.ownership import foreign_event

MINE = {"dag_id": "resub_preload", "run_id": "prel2", "task_id": "train", "map_index": -1, "try_number": 1}


def test_the_tries_own_event_is_not_foreign():
    assert foreign_event(dict(MINE), MINE) == ""


def test_an_event_naming_no_owner_is_taken_as_the_tries():
    assert foreign_event(None, MINE) == "" and foreign_event({}, MINE) == ""


def test_another_runs_or_an_earlier_tries_event_is_foreign_and_says_whose():
    other = foreign_event({**MINE, "run_id": "prel1", "try_number": 2}, MINE)
    assert "run prel1, task train, try 2" in other and "run_id, try_number differ" in other
    assert "try_number differ" in foreign_event({**MINE, "try_number": 0}, MINE)
