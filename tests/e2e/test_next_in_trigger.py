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


def test_the_next_attempt_after_a_stall_is_created_while_the_only_slot_is_taken(airflow_server):
    """The same with a hang after progress (tests/e2e/preload_dags/stall_no_slot.py): the trigger judges the stall,
    deletes attempt 1 and waits until its pods are gone, then creates attempt 2, while no slot is free for `train`
    (triggers.stall_end); the try's log names who asked for the delete."""
    server, dag_id = airflow_server, "stall_no_slot"
    server.api("POST", "/pools", expect=(200, 201, 409),
               json={"name": POOL, "slots": 1, "description": "one slot (test_next_in_trigger)",
                     "include_deferred": False})
    server.wait_for_dag(dag_id)
    server.unpause(dag_id)
    run_id = server.trigger(dag_id, {})
    run = server.wait_for_run(dag_id, run_id, timeout=600)
    assert run["state"] == "success", server.failure_report(dag_id, run_id)

    def xcom(task: str, key: str):
        return server.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task}/xcomEntries/{key}")["value"]

    hog, attempts, ledger = xcom("hog", "return_value"), xcom("train", "attempts"), xcom("train", "ledger")
    report = f"hog {hog}; attempts {attempts}"
    assert hog["saw"] and hog["saw"].endswith("-a2"), report
    assert [(a["attempt"], a["try"]) for a in attempts] == [(1, 1), (2, 1)], report  # no Airflow retry spent
    assert attempts[0]["in_try"] and attempts[0]["outcome"] == "disrupted", report
    assert [(i["attempt"], i["kind"]) for i in ledger["interruptions"]] == [(1, "stall")], ledger["interruptions"]
    assert hog["took"] < attempts[1]["start"] <= hog["saw_at"], report
    train = server.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/train")
    assert train["try_number"] == 1, report
    log = server.task_log(dag_id, run_id, "train", 1)
    assert "deleting stalled JobSet" in log and "trigger of try 1" in log, log[-4000:]
    assert "from the triggerer (attempt 2, try 1" in log, log[-4000:]
