"""Fixtures for the tests of the GKE target, shared with other folders: tests/support/gcp_fixtures.py (the fake Google
and Kubernetes servers; fast retries for every test here)."""

from tests.support.gcp_fixtures import (  # noqa: F401
    container, emulator, fast_retry, gcp_connection, gcs, k8s, keyfile_pem, tls)
