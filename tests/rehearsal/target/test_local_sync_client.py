"""The local target's sync client (what a task process's operator and hook use) is made from `<home>/kubeconfig` by the
kubernetes library alone: a retry's first request must not import the async client stack (kubernetes_asyncio, the
cncf.kubernetes hook module), which only a trigger uses. Checked in a fresh interpreter (this test process has long
imported everything), against an API server in this process behind a home's kubeconfig."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.doubles.js_outage import OutageCluster

PROBE = """
import json, sys
from mtc_provider.adapters.protocols import NotFound
from mtc_provider.targets import jobset_api
api = jobset_api({"kind": "local", "home": sys.argv[1]})
try:
    api.get_lock("default", "mtc-run-absent")
    answered = "an object"
except NotFound:
    answered = "404"
print(json.dumps({"answered": answered, "modules": sorted(m for m in sys.modules if m.split(".")[0] in
                  ("kubernetes_asyncio", "aiohttp") or m.startswith("airflow.providers.cncf.kubernetes.hooks"))}))
"""


def test_a_request_through_the_local_sync_client_loads_no_async_client(tmp_path):
    cluster = OutageCluster(tmp_path / "home")
    try:
        done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "home")], capture_output=True, text=True,
                              timeout=120)
    finally:
        cluster.server.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["answered"] == "404"  # the request went through the client to the server and back
    assert seen["modules"] == []
