"""The one place a GCS client is made: the google provider's GCSHook for GCS, and the same hook pointed at a GCS
JSON API endpoint of our own (the local target's GCS) for everything else.

`EndpointGCSHook` is GCSHook with two documented seams changed, so its `get_conn()`, uploads, downloads and
listings are GCSHook's own:
- `get_client_options(api_endpoint_override)` (GoogleBaseHook): the endpoint goes into the client's
  `client_options.api_endpoint`, which google-cloud-storage prefers over every other endpoint setting;
- `get_connection()`: the endpoint's own Google Cloud connection, anonymous (the connection's documented
  `is_anonymous` extra: https://airflow.apache.org/docs/apache-airflow-providers-google/stable/connections/gcp.html),
  so GoogleBaseHook's own credential code yields google.auth's AnonymousCredentials, as google-cloud-storage
  uses for an emulator;
- `get_credentials_and_project_id()` (GoogleBaseHook), only when a bearer token is given: google.oauth2's
  `Credentials(token)`, which google-cloud-storage's session sends as `Authorization: Bearer <token>`
  (google.auth.credentials.Credentials.apply). The local target's GCS takes its home's token
  (mtc_local/token.py): `local_gcs_hook(home)` reads it where the client is made, so a trigger carries only
  the home path, never the token.
"""

from __future__ import annotations

import json
import time
from typing import Any

from airflow.providers.google.cloud.hooks.gcs import GCSHook

LOCAL_PROJECT = "mtc-local"  # the project id the local target's buckets and IAM members are in
LOCAL_PROJECT_NUMBER = "0"
# A local GCS started on demand by a task (not `mtc local up`) exits when unused this long; the next use starts one.
IDLE_ENV, DEFAULT_IDLE_SECONDS = "MTC_GCS_IDLE_SECONDS", 120.0


class EndpointGCSHook(GCSHook):
    """GCSHook against a GCS JSON API endpoint (http://host:port): anonymous, or with a fixed bearer token."""

    def __init__(self, api_endpoint: str, project_id: str = LOCAL_PROJECT, token: str | None = None) -> None:
        self.api_endpoint = api_endpoint
        self.endpoint_project = project_id
        self._bearer = token
        super().__init__(gcp_conn_id=f"mtc_gcs_endpoint_{project_id}")

    def get_credentials_and_project_id(self) -> tuple[Any, str | None]:
        if self._bearer is None:
            return super().get_credentials_and_project_id()
        from google.oauth2.credentials import Credentials

        # No refresh token: a 401 fails at once (RefreshError) instead of asking Google for a new token.
        return Credentials(token=self._bearer), self.endpoint_project

    def get_connection(self, conn_id: str) -> Any:  # type: ignore[override]
        from airflow.sdk.definitions.connection import Connection

        return Connection(conn_id=conn_id, conn_type="google_cloud_platform",
                          extra=json.dumps({"is_anonymous": True, "project": self.endpoint_project}))

    def get_client_options(self, api_endpoint_override: str | None = None) -> Any:
        return super().get_client_options(api_endpoint_override or self.api_endpoint)


def gcs_hook(gcp_conn_id: str = "google_cloud_default", impersonation_chain: Any = None,
             api_endpoint: str | None = None) -> GCSHook:
    """GCSHook for GCS (the connection's credentials), or EndpointGCSHook when an endpoint is given."""
    if api_endpoint:
        return EndpointGCSHook(api_endpoint)
    return GCSHook(gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain)


# home -> (endpoint, when it last answered its health check). A server exits only after its idle time without a
# request, so one that answered less than a quarter of that ago (and at most FRESH_SECONDS ago) is still up unless
# killed: listings every poll interval then cost no health request each; a killed one is found within seconds.
_local_endpoints: dict[str, tuple[str, float]] = {}
FRESH_SECONDS = 10.0


def _serves(endpoint: str, home: str) -> bool:
    """The local GCS at `endpoint` holds this home's token (it proves so before it is sent the token)."""
    from mtc_local.token import serves_home

    return serves_home(endpoint, home)


def local_gcs_hook(home: str) -> EndpointGCSHook:
    """EndpointGCSHook for a local target home's GCS (started on demand) with the home's token."""
    from pathlib import Path

    from mtc_local.token import TokenError, require_token
    from mtc_provider.adapters.protocols import ApiError

    endpoint = local_gcs_endpoint(home)
    try:
        token = require_token(Path(home).expanduser().resolve())
    except TokenError as err:
        raise ApiError(401, f"the local GCS token of {home}: {err}", "Unauthorized") from None
    return EndpointGCSHook(endpoint, token=token)


def local_gcs_endpoint(home: str) -> str:
    """The endpoint of a local target home's GCS, started in the background when it is not running, as a
    process (`python -m mtc_local.gcs up`): the provider never imports the local target."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from mtc_provider.adapters.protocols import ApiError

    home = str(Path(home).expanduser().resolve())
    idle = os.environ.get(IDLE_ENV) or str(DEFAULT_IDLE_SECONDS)
    endpoint, checked = _local_endpoints.get(home, ("", 0.0))
    if endpoint and time.monotonic() - checked < min(FRESH_SECONDS, float(idle) / 4):
        return endpoint
    if endpoint and _serves(endpoint, home):
        _local_endpoints[home] = (endpoint, time.monotonic())
        return endpoint
    done = subprocess.run([sys.executable, "-m", "mtc_local.gcs", "up", "--home", home, "--idle-seconds", idle],
                          capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise ApiError(503, f"the local GCS for {home} did not start: {(done.stderr or done.stdout).strip()[-500:]}",
                       "ServiceUnavailable")
    _local_endpoints[home] = (lines[-1].strip(), time.monotonic())
    return _local_endpoints[home][0]
