"""Where a GCS client is made: the google provider's GCSHook for GCS, and the same hook pointed at a GCS JSON API
endpoint of our own (the local target's GCS) for the bucket and IAM steps; the local target's checkpoint listings
make the same client without this module's imports (adapters.gcs_endpoint.EndpointClient).

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
  (google.auth.credentials.Credentials.apply). The local target's GCS takes its home's token: mtc-local's
  `mtc_local.target.gcs.local_gcs_hook(home)` reads it where the client is made, so a trigger carries only the
  home path, never the token.
"""

from __future__ import annotations

import json
from typing import Any

from airflow.providers.google.cloud.hooks.gcs import GCSHook

from mtc_provider.adapters.gcs_endpoint import LOCAL_PROJECT


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
        from airflow.sdk import Connection

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
