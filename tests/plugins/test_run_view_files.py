"""The run view's folder listing and its links (plugins/run_view.py)."""

from __future__ import annotations

import os

from mtc_provider.links.goodput import chart_url
from mtc_provider.links.jobset import checkpoints_url
from mtc_provider.plugins.run_view import _listing


def listing(folder, path: str) -> str:
    return _listing(os.open(folder, os.O_RDONLY | os.O_DIRECTORY), folder, path)


def test_listing_links_each_entry_relative(tmp_path):
    (tmp_path / "10").mkdir()
    (tmp_path / "a b.txt").write_text("x")
    page = listing(tmp_path, "")
    assert "<a href='10/'>10/</a>" in page and "<a href='a%20b.txt'>a b.txt</a>" in page
    assert "../" not in page  # the folder's root has no parent link
    assert "<a href='../'>" in listing(tmp_path / "10", "10/")


def test_local_links_point_at_the_plugin_when_the_run_is_known():
    run = ("mtc_resilient_training", "manual__2026-12-01T10:00:00+00:00")
    encoded = "/mtc/runs/mtc_resilient_training/manual__2026-12-01T10%3A00%3A00%2B00%3A00"
    assert checkpoints_url("/h/buckets/b/e2e/checkpoints", run=run).endswith(encoded + "/files/checkpoints/")
    assert chart_url("/h/buckets/b/e2e/goodput.png", run).endswith(encoded + "/chart.png")
    # GKE keeps its Cloud Console links, the run or not.
    assert checkpoints_url("gs://b/e2e/checkpoints", run=run).startswith("https://console.cloud.google.com/")
    assert chart_url("gs://b/e2e/goodput/r.png", run).startswith("https://console.cloud.google.com/")
