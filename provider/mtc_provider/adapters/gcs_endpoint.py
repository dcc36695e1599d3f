"""A GCS JSON API endpoint of our own (the local target's GCS): its project and idle settings, and the storage client
its checkpoint store lists through, made without importing the google provider's GCS hook module.

`EndpointClient.get_conn()` makes the client `EndpointGCSHook.get_conn()` makes (adapters.gcs_hook: GCSHook's
`get_conn`, `storage.Client(credentials, client_info, project, client_options)`, with every seam that hook changes:
the endpoint as `client_options.api_endpoint`, anonymous or `Credentials(token)`, project `mtc-local`). For an
endpoint GCSHook adds nothing else: no Airflow connection, key file, impersonation or Secret Manager is read. Its
module, though, imports at load what only other paths use: gcloud-aio-storage and aiohttp (GCSAsyncHook),
googleapiclient and httplib2 (GoogleBaseHook), the Secret Manager client (`utils/credentials_provider` ->
`_internal_client/secret_manager_client`): about 0.3 s of every Airflow retry on the local target, before the next
JobSet could be created (docs/benchmarks.md, section 2). The listing code itself (GcsCheckpointStore: matchGlob,
startOffset, pages, error mapping) is the one GKE runs; GKE's store keeps GCSHook (its connection's credentials).
"""

from __future__ import annotations

from typing import Any

LOCAL_PROJECT = "mtc-local"  # the project id the local target's buckets and IAM members are in
LOCAL_PROJECT_NUMBER = "0"
# A local GCS started on demand by a task (not `mtc local up`) exits when unused this long; the next use starts one.
IDLE_ENV, DEFAULT_IDLE_SECONDS = "MTC_GCS_IDLE_SECONDS", 120.0


class EndpointClient:
    """The storage client of a GCS JSON API endpoint (http://host:port), anonymous or with a fixed bearer token, in
    the shape a GcsCheckpointStore reads as its `hook` (`api_endpoint`, `get_conn()`)."""

    def __init__(self, api_endpoint: str, token: str | None = None, project_id: str = LOCAL_PROJECT) -> None:
        self.api_endpoint = api_endpoint
        self.project_id = project_id
        self._bearer = token
        self._conn: Any = None

    def get_conn(self) -> Any:
        if self._conn is None:
            from google.api_core.client_options import ClientOptions
            from google.cloud import storage

            self._conn = storage.Client(project=self.project_id, credentials=self._credentials(),
                                        client_options=ClientOptions(api_endpoint=self.api_endpoint))
        return self._conn

    def _credentials(self) -> Any:
        if self._bearer is None:  # what GoogleBaseHook yields for an `is_anonymous` connection
            from google.auth.credentials import AnonymousCredentials

            return AnonymousCredentials()
        from google.oauth2.credentials import Credentials

        # No refresh token: a 401 fails at once (RefreshError) instead of asking Google for a new token.
        return Credentials(token=self._bearer)
