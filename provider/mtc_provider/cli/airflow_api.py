"""The few calls of Airflow's public REST API (v2) the CLI makes, over the standard library (no client package).

Where Airflow is and who asks, as Airflow's own clients take them: a URL (`AIRFLOW_API_URL`, `AIRFLOW_URL`); a token
(`AIRFLOW_CLI_TOKEN`, `AIRFLOW_TOKEN`, as airflowctl) or a username and password for a JWT from `POST /auth/token`.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

REQUEST_TIMEOUT_S = 30.0


class AirflowApiError(RuntimeError):
    """The API refused or could not be reached: the message names the request and the answer."""


def env(*names: str) -> str | None:
    """The first of these environment variables that is set and not empty."""
    return next((os.environ[name] for name in names if os.environ.get(name)), None)


class AirflowApi:
    """The few calls `mtc run` makes, over the standard library (no client package to install)."""

    def __init__(self, url: str, token: str | None = None, username: str | None = None,
                 password: str | None = None, timeout: float = REQUEST_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._token = token
        self._login = (username, password)

    def _request(self, method: str, path: str, body: Any = None, auth: bool = True) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:1000]
            raise AirflowApiError(f"{method} {self.url}{path} -> HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AirflowApiError(f"{method} {self.url}{path}: Airflow's API is not reachable ({reason})") from None
        return json.loads(text) if text else None

    def token(self) -> str:
        if not self._token:
            username, password = self._login
            if not username or not password:
                raise AirflowApiError("no credentials: --api-token (or AIRFLOW_CLI_TOKEN), or --username and "
                                      "--password (or AIRFLOW_USERNAME and AIRFLOW_PASSWORD)")
            self._token = self._request("POST", "/auth/token", {"username": username, "password": password},
                                        auth=False)["access_token"]
        return self._token

    def dag(self, dag_id: str) -> dict[str, Any]:
        return self._request("GET", f"/api/v2/dags/{urllib.parse.quote(dag_id)}")

    def unpause(self, dag_id: str) -> dict[str, Any]:
        return self._request("PATCH", f"/api/v2/dags/{urllib.parse.quote(dag_id)}?update_mask=is_paused",
                             {"is_paused": False})

    def trigger(self, dag_id: str, conf: dict[str, Any], note: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"logical_date": None, "conf": conf}
        if note:
            body["note"] = note
        return self._request("POST", f"/api/v2/dags/{urllib.parse.quote(dag_id)}/dagRuns", body)

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self._request("GET", f"/api/v2/dags/{urllib.parse.quote(dag_id)}/dagRuns/"
                                    f"{urllib.parse.quote(run_id, safe='')}")

    def tries(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        """Every try of one task instance (Airflow 3: TaskInstanceHistoryCollectionResponse.task_instances)."""
        answer = self._request("GET", f"/api/v2/dags/{urllib.parse.quote(dag_id)}/dagRuns/"
                                      f"{urllib.parse.quote(run_id, safe='')}/taskInstances/"
                                      f"{urllib.parse.quote(task_id)}/tries")
        return list((answer or {}).get("task_instances") or [])

    def ui_url(self, dag_id: str, run_id: str) -> str:
        return f"{self.url}/dags/{urllib.parse.quote(dag_id)}/runs/{urllib.parse.quote(run_id, safe='')}"
