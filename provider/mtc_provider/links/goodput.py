"""The goodput chart's extra link: the PNG next to the checkpoints (Cloud Console on GKE, file:// locally)."""

from __future__ import annotations

import os
from urllib.parse import quote

from mtc_provider.links.jobset import CONSOLE, _StoredUrlLink, checkpoints_url


def console_object_url(gcs_uri: str) -> str:
    """gs://bucket/path -> the object's page in the Cloud Console (it previews PNGs)."""
    path = gcs_uri[len("gs://"):]
    return f"{CONSOLE}/storage/browser/_details/{quote(path)}"


def chart_url(chart: str) -> str:
    """Where the link opens the chart: its Cloud Console page for a gs:// object, else a file:// URL (local target,
    like the checkpoint-folder link), absolute and quoted so a path with spaces still opens."""
    if chart.startswith("gs://"):
        return console_object_url(chart)
    return checkpoints_url(os.path.abspath(chart))


class GoodputChartLink(_StoredUrlLink):
    name = "Goodput chart"
    key = "mtc_goodput_chart_url"
