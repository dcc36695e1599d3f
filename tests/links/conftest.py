"""Fixtures for the tests of the console links, shared with other folders: tests/support/jobset_fixtures.py (the in-
memory JobSet cluster, the fake API server, fast retries)."""

from tests.support.jobset_fixtures import apiserver, cluster, fast_retries, outage_cluster  # noqa: F401
