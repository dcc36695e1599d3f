"""Fixtures for the end-to-end UI test: a real Airflow on 127.0.0.1 and Debian's Chromium (see airflow_harness)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from airflow_harness import (ARTIFACTS, BROWSER_ARGS, CHROMIUM, COMPONENTS, REPO, AirflowServer, free_port, server_env,
                             session_env)


@pytest.fixture(scope="session")
def airflow_server(tmp_path_factory):
    """One Airflow on a free 127.0.0.1 port for the whole e2e session (issue 36: each start and stop cost 1-2
    minutes under load): test_cli_run, test_preload_executor and test_ui share it, each with its own DAG runs and
    run names, so no test depends on another's having run (SESSION_ENV says what each needs of it).
    test_ui_gke keeps an api-server of its own: a scheduler or triggerer would move its planted run."""
    root = tmp_path_factory.mktemp("e2e")
    home, local_home = root / "airflow", root / "mtc-local"
    home.mkdir()
    local_home.mkdir()
    port = free_port()
    # MTC_E2E_DAGS_FOLDER: run the same checks against another copy of the DAGs (debugging a DAG change).
    dags_folder = Path(os.environ.get("MTC_E2E_DAGS_FOLDER") or REPO / "dags")
    server = AirflowServer(home=home, local_home=local_home, port=port,
                           env=server_env(home, local_home, port, dags_folder, session_env(dags_folder)))
    try:
        server.start()
        yield server
    finally:
        killed = server.stop()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        for name in COMPONENTS:  # kept next to the screenshots for a post-mortem
            if server.log_path(name).exists():
                (ARTIFACTS / f"{name}.log").write_text(server.log_tail(name, 400))
        if server.signalled_twice:
            warnings.warn("Airflow stopped only on a second SIGINT: " + ", ".join(server.signalled_twice))
        if server.wedged_workers:
            warnings.warn("LocalExecutor workers wedged at their exit, killed by PID as Airflow's own fix does "
                          "(apache/airflow#67870): " + ", ".join(server.wedged_workers))
        if killed:
            tails = "\n".join(f"--- {name}:\n{server.log_tail(name, 60)}" for name in COMPONENTS
                              if server.log_path(name).exists())
            pytest.fail("processes were still running after Airflow stopped (killed by PID):\n" + "\n".join(killed)
                        + "\n" + tails)


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, headless, driven by Playwright (no Playwright browser download)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run .ci/install-browser")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
