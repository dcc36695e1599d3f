"""Fixtures for the tests of the triggers, shared with other folders: tests/support/jobset_fixtures.py (the in-memory
JobSet cluster, the fake API server, fast retries); tests/support/checkpoint_fixtures.py (the counting GCS emulator)."""

from tests.support.jobset_fixtures import apiserver, cluster, fast_retries, outage_cluster  # noqa: F401
from tests.support.checkpoint_fixtures import gcs  # noqa: F401
