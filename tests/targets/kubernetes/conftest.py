"""Fixtures for the tests of the Kubernetes target, shared with other folders: tests/support/local_cluster.py (a local
cluster home and its clients)."""

from tests.support.local_cluster import api, api_client, home, kubeconfig, workload  # noqa: F401
