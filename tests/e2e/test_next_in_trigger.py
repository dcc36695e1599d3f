"""An in-try attempt created while every slot of the launch pool is taken (issue 43, "Done when"; not timed).

A real Airflow (api-server, scheduler, dag-processor, triggerer, LocalExecutor: the e2e session's one Airflow,
airflow_harness) runs tests/e2e/preload_dags/in_try_no_slot.py on the local target: `train`
(`next_attempt_in_trigger=True`) and `hog` share a pool of one slot. `hog` takes the slot once `train` deferred and
holds it until it sees `train`'s attempt 2: so attempt 2 was created while no slot was free for `train`, by the
triggerer (triggers.next_in_try). Airflow's pools do not count deferred tasks unless `include_deferred` is set
(airflow-core models/pool.py), which is the point: the deferred `train` needs no slot until its try ends.
"""

from __future__ import annotations

import pytest

# A long rehearsal: `make soak` runs it beside the orchestrator-fault soak (CI does), `make test` leaves it out.
pytestmark = [pytest.mark.slow, pytest.mark.soak, pytest.mark.timeout(900)]

DAG_ID, POOL = "in_try_no_slot", "mtc_e2e_one_slot"


def test_the_next_attempt_is_created_while_the_only_slot_is_taken(airflow_server):
    server = airflow_server
    server.api("POST", "/pools", expect=(200, 201, 409),
               json={"name": POOL, "slots": 1, "description": "one slot (test_next_in_trigger)",
                     "include_deferred": False})
    server.wait_for_dag(DAG_ID)
    server.unpause(DAG_ID)
    run_id = server.trigger(DAG_ID, {})
    run = server.wait_for_run(DAG_ID, run_id, timeout=600)
    assert run["state"] == "success", server.failure_report(DAG_ID, run_id)

    def xcom(task: str, key: str):
        return server.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task}/xcomEntries/{key}")["value"]

    hog = xcom("hog", "return_value")
    attempts = xcom("train", "attempts")
    report = f"hog {hog}; attempts {attempts}"
    assert hog["saw"] and hog["saw"].endswith("-a2"), report
    assert [(a["attempt"], a["try"]) for a in attempts] == [(1, 1), (2, 1)], report  # no Airflow retry spent
    assert attempts[0]["in_try"] and attempts[0]["interruption"] == "graceful", report
    # attempt 2 was submitted after hog took the pool's only slot, and before hog let it go
    assert hog["took"] < attempts[1]["start"] <= hog["saw_at"], report
    train = server.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/train")
    assert train["try_number"] == 1, report
    log = server.task_log(DAG_ID, run_id, "train", 1)
    assert "from the triggerer (attempt 2, try 1" in log, log[-4000:]
