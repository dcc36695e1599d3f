"""Airflow 3's public REST API, the part `mtc run` uses, as Airflow documents and answers it:

- `POST /auth/token` {username, password} -> {access_token} (simple auth manager; 401 for a bad password);
- `GET /api/v2/dags/{dag_id}` -> the DAG with `is_paused` (404 `{"detail": ...}` for an unknown DAG);
- `PATCH /api/v2/dags/{dag_id}?update_mask=is_paused` {is_paused} -> the DAG (only `is_paused` may be updated);
- `POST /api/v2/dags/{dag_id}/dagRuns` {logical_date, conf, note} -> the run, `queued`;
- `GET /api/v2/dags/{dag_id}/dagRuns/{run_id}` -> the run.

The scheduler's part: a queued run of an unpaused DAG starts (`running`) at the next read, and ends (`final_state`)
`reads_to_end` reads later; a paused DAG's run stays queued, as Airflow's scheduler leaves it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from tests.doubles.http import HttpDouble, HttpError


class AirflowApiDouble(HttpDouble):
    def __init__(self, dags: dict[str, bool], username: str = "admin", password: str = "secret",
                 final_state: str = "success", reads_to_end: int = 2) -> None:
        super().__init__()
        self.paused = dict(dags)  # dag_id -> is_paused
        self.runs: dict[tuple[str, str], dict[str, Any]] = {}
        self.username, self.password = username, password
        self.final_state, self.reads_to_end = final_state, reads_to_end
        self.require_token = True

    def error_body(self, status: int, message: str, reason: str = "") -> dict[str, Any]:
        return {"detail": message}  # FastAPI's HTTPException body

    def answer(self, method: str, path: str, query: dict[str, list[str]], body: Any, token: str) -> Any:
        if (method, path) != ("POST", "/auth/token"):
            return None
        if body != {"username": self.username, "password": self.password}:
            return 401, self.error_body(401, "Invalid credentials")
        return 201, {"access_token": "token-1"}

    def _dag(self, dag_id: str) -> dict[str, Any]:
        if dag_id not in self.paused:
            raise HttpError(404, f"Dag with id {dag_id} was not found")
        return {"dag_id": dag_id, "is_paused": self.paused[dag_id]}

    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Any:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[:2] != ["api", "v2"] or len(parts) < 4 or parts[2] != "dags":
            raise HttpError(404, "Not Found")
        dag_id = parts[3]
        if len(parts) == 4 and method == "GET":
            return 200, self._dag(dag_id)
        if len(parts) == 4 and method == "PATCH":
            self._dag(dag_id)
            if query.get("update_mask") not in (None, ["is_paused"]):
                raise HttpError(400, "Only `is_paused` field can be updated through the REST API")
            self.paused[dag_id] = bool(body["is_paused"])
            return 200, self._dag(dag_id)
        if parts[4:] == ["dagRuns"] and method == "POST":
            self._dag(dag_id)
            run_id = f"manual__{len(self.runs) + 1}"
            run = {"dag_id": dag_id, "dag_run_id": run_id, "state": "queued", "conf": body["conf"], "reads": 0}
            self.runs[(dag_id, run_id)] = run
            return 200, {k: v for k, v in run.items() if k != "reads"}
        if len(parts) == 6 and parts[4] == "dagRuns" and method == "GET":
            run = self.runs.get((dag_id, parts[5]))
            if run is None:
                raise HttpError(404, f"The DagRun with dag_id: `{dag_id}` and run_id: `{parts[5]}` was not found")
            self._schedule(run)
            return 200, {k: v for k, v in run.items() if k != "reads"}
        raise HttpError(405, "Method Not Allowed")

    def _schedule(self, run: dict[str, Any]) -> None:
        if run["state"] == "queued" and not self.paused[run["dag_id"]]:
            run["state"] = "running"
        elif run["state"] == "running":
            run["reads"] += 1
            if run["reads"] >= self.reads_to_end:
                run["state"] = self.final_state
