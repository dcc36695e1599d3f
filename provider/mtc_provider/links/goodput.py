"""The goodput chart's extra link: the PNG next to the checkpoints (Cloud Console on GKE, file:// locally)."""

from __future__ import annotations

from urllib.parse import quote

from mtc_provider.links.jobset import CONSOLE, _StoredUrlLink


def console_object_url(gcs_uri: str) -> str:
    """gs://bucket/path -> the object's page in the Cloud Console (it previews PNGs)."""
    path = gcs_uri[len("gs://"):]
    return f"{CONSOLE}/storage/browser/_details/{quote(path)}"


class GoodputChartLink(_StoredUrlLink):
    name = "Goodput chart"
    key = "mtc_goodput_chart_url"
