"""The soak's Kubernetes API faults, through the local API server's outage switch (local/cluster/faults.py:
`POST /mtc/faults` with the cluster's bearer token; that path is never faulted): 503 with Retry-After, connections
dropped without an answer, requests that hang, open watches cut.

One thin adapter, so the soak's injectors read as the issue does and only this file knows the switch's spelling.
It reaches the switch with the home's kubeconfig (server, CA and token), as kubectl would.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from mtc_local.cluster import kubeconfig

CONTROL_PATH = "/mtc/faults"


class ApiFaults:
    def __init__(self, home: str | Path) -> None:
        self.home = Path(home)

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST the switch with the kubeconfig's server, CA and token (as kubectl would reach the cluster)."""
        config = yaml.safe_load(kubeconfig.path(self.home).read_text())
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        tls = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        request = urllib.request.Request(cluster["server"] + CONTROL_PATH, data=json.dumps(body).encode(),
                                         method="POST", headers={"Authorization": f"Bearer {user['token']}",
                                                                 "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, context=tls, timeout=30) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as err:
            if err.code == 404:
                raise AssertionError(f"the local API server has no outage switch ({CONTROL_PATH}) on this "
                                     "branch") from None
            raise

    def unavailable(self, seconds: float, retry_after: int = 5) -> dict[str, Any]:
        """503 ServiceUnavailable with `Retry-After: retry_after` to every request."""
        return self._post({"mode": "unavailable", "seconds": seconds, "retry_after": retry_after})

    def refuse(self, seconds: float) -> dict[str, Any]:
        """Every connection reset without an answer (the switch's `drop`: to a client, a refused connection)."""
        return self._post({"mode": "drop", "seconds": seconds})

    def hang(self, seconds: float) -> dict[str, Any]:
        return self._post({"mode": "hang", "seconds": seconds})

    def cut_watches(self) -> dict[str, Any]:
        return self._post({"cut_watches": True})

    def clear(self) -> dict[str, Any]:
        return self._post({"mode": "none"})
