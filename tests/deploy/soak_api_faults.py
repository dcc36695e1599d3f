"""The soak's Kubernetes API faults, through the local API server's outage switch (local/cluster/faults.py:
`POST /mtc/faults` with the cluster's bearer token; that path is never faulted): 503 with Retry-After, connections
dropped without an answer, requests that hang, open watches cut.

One thin adapter, so the soak's injectors read as the issue does and only this file knows the switch's spelling.
It goes through the real kubernetes client with the home's kubeconfig (its CA and token), as kubectl would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mtc_provider.local.cluster import kubeconfig

CONTROL_PATH = "/mtc/faults"


class ApiFaults:
    def __init__(self, home: str | Path) -> None:
        self.home = Path(home)

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        from kubernetes import config

        client = config.new_client_from_config(config_file=str(kubeconfig.path(self.home)))
        try:
            data, status, _ = client.call_api(CONTROL_PATH, "POST", body=body, auth_settings=["BearerToken"],
                                              response_type="object", _preload_content=True, _request_timeout=30)
        finally:
            client.close()
        if status == 404:
            raise AssertionError(f"the local API server has no outage switch ({CONTROL_PATH}) on this branch")
        return data

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
