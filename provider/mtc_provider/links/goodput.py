"""The goodput chart's extra link: the PNG next to the checkpoints (Cloud Console on GKE; locally served over http
by the run view plugin, links/run_view.py)."""

from __future__ import annotations

import os
from urllib.parse import quote

from mtc_provider.links.jobset import CONSOLE, _StoredUrlLink, checkpoints_url


def console_object_url(gcs_uri: str) -> str:
    """gs://bucket/path -> the object's page in the Cloud Console (it previews PNGs)."""
    path = gcs_uri[len("gs://"):]
    return f"{CONSOLE}/storage/browser/_details/{quote(path)}"


def chart_url(chart: str, run: tuple[str, str] | None = None) -> str:
    """Where the link opens the chart: its Cloud Console page for a gs:// object; a local PNG through the run view
    plugin when the run (dag_id, run_id) is known, else a file:// URL, absolute and quoted."""
    if chart.startswith("gs://"):
        return console_object_url(chart)
    if run is not None:
        from mtc_provider.links.run_view import chart_url as served_chart_url

        return served_chart_url(*run)
    return checkpoints_url(os.path.abspath(chart))


class GoodputChartLink(_StoredUrlLink):
    name = "Goodput chart"
    key = "mtc_goodput_chart_url"
