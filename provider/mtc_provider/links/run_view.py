"""Where the provider's Airflow plugin serves a run: its view, and on the local target its files over http.

Airflow 3.3's UI draws an extra link only for http(s)/mailto URLs or ones on its own origin, never file://; so on
the local target the checkpoint-folder and goodput-chart links point at the plugin's FastAPI app inside the
api-server (plugins/run_view.py), which serves them to users who may read the DAG's runs.

The URLs are stored at run time (Airflow 3 shows the URL in the link's XCom), so they are built from `[api]
base_url` when it is set (what users open), else as paths on the api-server's own origin.
"""

from __future__ import annotations

from urllib.parse import quote

PREFIX = "/mtc"  # the plugin's FastAPI app's url_prefix (not one of Airflow's reserved prefixes)


def _root() -> str:
    try:
        from airflow.configuration import conf

        base = conf.get("api", "base_url", fallback="") or ""
    except Exception:  # noqa: BLE001 - no Airflow config here (a unit test): a path on the same origin
        base = ""
    return base.rstrip("/")


def run_path(dag_id: str, run_id: str) -> str:
    """`/mtc/runs/<dag>/<run>`, each part percent-encoded (run ids carry ':' and '+')."""
    return f"{PREFIX}/runs/{quote(dag_id, safe='')}/{quote(run_id, safe='')}"


def folder_url(dag_id: str, run_id: str) -> str:
    """The run's checkpoint folder as a directory listing (local target)."""
    return _root() + run_path(dag_id, run_id) + "/files/checkpoints/"


def chart_url(dag_id: str, run_id: str) -> str:
    """The run's goodput chart as a PNG (local target)."""
    return _root() + run_path(dag_id, run_id) + "/chart.png"
