"""Fixtures for the JobSet tests: fast retry waits and the fake API server."""

from __future__ import annotations

import pytest

from mtc_provider.adapters import retry


@pytest.fixture
def fast_retries(monkeypatch):
    """adapters.retry reads its waits at call time; tests shrink them (the module documents this)."""
    monkeypatch.setattr(retry, "INITIAL_WAIT", 0.001)
    monkeypatch.setattr(retry, "MAX_WAIT", 0.01)


@pytest.fixture
def apiserver():
    from js_apiserver import FakeApiServer

    server = FakeApiServer().start()
    yield server
    server.stop()
