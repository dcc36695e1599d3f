"""Fixtures for the tests of the launch operator, shared with other folders: tests/support/jobset_fixtures.py (the in-
memory JobSet cluster, the fake API server, fast retries); tests/support/local_cluster.py (a local cluster home and
its clients)."""

from tests.support.jobset_fixtures import apiserver, cluster, fast_retries, outage_cluster  # noqa: F401
from tests.support.local_cluster import api, api_client, home, kubeconfig, workload  # noqa: F401
