"""Airflow tries that never reached the provider, counted beside the attempts (issue #33 item 9; core.attempt.tries).

The tries are the shape Airflow 3's REST API answers for
`GET /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/tries` (TaskInstanceHistoryCollectionResponse:
`task_instances` with `try_number` and `state`); the attempts are the run record's (`"try"` of each attempt)."""

from mtc_provider.core.attempt.tries import tries_line, unreached_tries

SOAK = [  # the soak of issue #33: 5 tries, 2 attempts; tries 2-4 failed in the Task SDK while the api-server was down
    {"try_number": 1, "state": "up_for_retry"}, {"try_number": 2, "state": "failed"},
    {"try_number": 3, "state": "up_for_retry"}, {"try_number": 4, "state": "failed"},
    {"try_number": 5, "state": "deferred"},
]
ATTEMPTS = [{"attempt": 1, "try": 1, "jobset": "r-a1"}, {"attempt": 2, "try": 5, "jobset": "r-a2"}]


def test_tries_with_no_attempt_are_counted_with_their_state_and_reason():
    unreached = unreached_tries(SOAK, ATTEMPTS)
    assert [(t["try"], t["state"]) for t in unreached] == [(2, "failed"), (3, "up_for_retry"), (4, "failed")]
    assert "ended before the launch submitted or watched one" in unreached[0]["reason"]
    line = tries_line(len(SOAK), len(ATTEMPTS), unreached)
    assert line.startswith("5 Airflow tries, 2 attempts; 3 tries never reached the provider: try 2 (failed), "
                           "try 3 (up_for_retry), try 4 (failed)")


def test_a_live_or_successful_try_is_not_counted_and_a_run_without_gaps_says_only_the_counts():
    tries = [{"try_number": 1, "state": "up_for_retry"}, {"try_number": 2, "state": "success"},
             {"try_number": 3, "state": "running"}]
    assert unreached_tries(tries, [{"try": 1}]) == []
    assert tries_line(2, 2, []) == "2 Airflow tries, 2 attempts"
    skipped = unreached_tries([{"try_number": 1, "state": "upstream_failed"}], [])
    assert skipped[0]["reason"] == "Airflow set it upstream_failed without running it"
