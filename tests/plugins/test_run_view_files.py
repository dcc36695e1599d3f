"""The run view plugin serves a local run's checkpoint folder: nothing outside it (plugins/run_view.py)."""

from __future__ import annotations

import pytest
from fastapi import HTTPException

from mtc_provider.links.jobset import checkpoints_url
from mtc_provider.links.goodput import chart_url
from mtc_provider.plugins.run_view import _inside, _listing


def test_paths_outside_the_folder_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("MTC_LOCAL_HOME", str(tmp_path))  # the run view's file root: <local home>/buckets
    monkeypatch.delenv("AIRFLOW__MTC__RUN_VIEW_FILE_ROOTS", raising=False)
    root = tmp_path / "buckets" / "run" / "checkpoints"
    (root / "10" / "items").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("no")
    (root / "out").symlink_to(tmp_path)
    assert _inside(root, "10/items") == (root / "10" / "items").resolve()
    assert _inside(root, "") == root.resolve()
    for bad in ("../../secret.txt", "../", "out/secret.txt", "/etc/passwd"):
        with pytest.raises(HTTPException) as caught:
            _inside(root, bad)
        assert caught.value.status_code == 404 and bad in caught.value.detail  # absent, not forbidden: no probing


def test_listing_links_each_entry_relative(tmp_path):
    (tmp_path / "10").mkdir()
    (tmp_path / "a b.txt").write_text("x")
    page = _listing(tmp_path, tmp_path, "")
    assert "<a href='10/'>10/</a>" in page and "<a href='a%20b.txt'>a b.txt</a>" in page
    assert "../" not in page  # the folder's root has no parent link
    assert "<a href='../'>" in _listing(tmp_path, tmp_path / "10", "10/")


def test_local_links_point_at_the_plugin_when_the_run_is_known():
    run = ("mtc_resilient_training", "manual__2026-12-01T10:00:00+00:00")
    encoded = "/mtc/runs/mtc_resilient_training/manual__2026-12-01T10%3A00%3A00%2B00%3A00"
    assert checkpoints_url("/h/buckets/b/e2e/checkpoints", run=run).endswith(encoded + "/files/checkpoints/")
    assert chart_url("/h/buckets/b/e2e/goodput.png", run).endswith(encoded + "/chart.png")
    # GKE keeps its Cloud Console links, the run or not.
    assert checkpoints_url("gs://b/e2e/checkpoints", run=run).startswith("https://console.cloud.google.com/")
    assert chart_url("gs://b/e2e/goodput/r.png", run).startswith("https://console.cloud.google.com/")
