"""`mtc status` counts the launch's Airflow tries that never reached the provider, with the reason (issue #33 item
9: "2 attempts beside 5 tries" after an api-server outage during resumes). Airflow's side is a real HTTP server on
127.0.0.1 answering `GET /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/tries` in the shape
Airflow 3's REST API documents (TaskInstanceHistoryCollectionResponse: `task_instances`, `total_entries`), behind
a bearer token; the run's record is the one the launch writes beside its checkpoints (adapters.run_records)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pytest
from typer.testing import CliRunner

from mtc_provider.adapters.run_records import record_run
from mtc_provider.cli.app import app

runner = CliRunner()
TRIES = [{"try_number": 1, "state": "up_for_retry"}, {"try_number": 2, "state": "failed"},
         {"try_number": 3, "state": "up_for_retry"}, {"try_number": 4, "state": "failed"},
         {"try_number": 5, "state": "success"}]


@pytest.fixture
def airflow():
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            seen.append(unquote(self.path))
            if self.headers.get("Authorization") != "Bearer tok":
                body, code = {"detail": "Not authenticated"}, 401
            elif self.path.endswith("/taskInstances/train/tries"):
                body, code = {"task_instances": TRIES, "total_entries": len(TRIES)}, 200
            else:
                body, code = {"detail": "Not Found"}, 404
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_status_counts_the_tries_that_never_reached_the_provider(tmp_path, airflow, monkeypatch):
    url, seen = airflow
    checkpoints = tmp_path / "out" / "llama" / "checkpoints"
    checkpoints.mkdir(parents=True)
    attempts = [{"attempt": 1, "try": 1, "jobset": "llama-a1", "start": 1.0, "end": 2.0, "outcome": "disrupted",
                 "restarts": 0, "last_step": 20, "reason": "resubmitting"},
                {"attempt": 2, "try": 5, "jobset": "llama-a2", "start": 3.0, "end": 4.0, "outcome": "finished",
                 "restarts": 0, "last_step": 100, "reason": ""}]
    record_run(str(checkpoints), "google_cloud_default", None, run_name="llama", namespace="default",
               target_step=100, state="succeeded", attempts=attempts,
               owner={"dag_id": "mtc_training", "run_id": "manual__1", "task_id": "train"}, reason="")
    monkeypatch.setenv("AIRFLOW_CLI_TOKEN", "tok")
    result = runner.invoke(app, ["status", "llama", "--base", str(tmp_path / "out"), "--api-url", url, "-o", "json"])
    assert result.exit_code == 0, result.output
    tries = json.loads(result.stdout)["tries"]
    assert [(t["try"], t["state"]) for t in tries["unreached"]] == [(2, "failed"), (3, "up_for_retry"),
                                                                      (4, "failed")]
    assert tries["line"].startswith("5 Airflow tries, 2 attempts; 3 tries never reached the provider")
    assert seen == ["/api/v2/dags/mtc_training/dagRuns/manual__1/taskInstances/train/tries"]
    text = runner.invoke(app, ["status", "llama", "--base", str(tmp_path / "out"), "--api-url", url])
    assert "3 tries never reached the provider: try 2 (failed)" in " ".join(text.stdout.split()), text.output
