"""The local target's GCS as the provider reads it: a GCSHook pointed at the home's local GCS (started on demand,
as a process) with the home's token for the bucket and IAM steps, and the checkpoint store of a folder in a local
bucket, listed through that GCS by the GKE code path (GcsCheckpointStore) with the same storage client made without
the google provider's hook module (adapters.gcs_endpoint: an Airflow retry lists before it creates its next JobSet).
The registry's `store_for_path` hands a trigger this store from the folder alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from mtc_local.token import TokenError, require_token, serves_home
from mtc_provider.adapters.checkpoint_stores import (
    GcsCheckpointStore,
    ListingCost,
    FinalizedSteps,
    local_path,
    split_gcs_uri,
)
from mtc_provider.adapters.protocols import ApiError, CheckpointInfo

if TYPE_CHECKING:  # the google provider's GCSHook is imported by the bucket and IAM steps only
    from mtc_provider.adapters.gcs_endpoint import EndpointClient
    from mtc_provider.adapters.gcs_hook import EndpointGCSHook

# home -> (endpoint, when it last answered its health check). A server exits only after its idle time without a
# request, so one that answered less than a quarter of that ago (and at most FRESH_SECONDS ago) is still up unless
# killed: listings every poll interval then cost no health request each; a killed one is found within seconds.
_local_endpoints: dict[str, tuple[str, float]] = {}
FRESH_SECONDS = 10.0


def _serves(endpoint: str, home: str) -> bool:
    """The local GCS at `endpoint` holds this home's token (it proves so before it is sent the token)."""
    return serves_home(endpoint, home)


def local_gcs_hook(home: str) -> EndpointGCSHook:
    """EndpointGCSHook for a local target home's GCS (started on demand) with the home's token."""
    from mtc_provider.adapters.gcs_hook import EndpointGCSHook

    endpoint, token = _endpoint_and_token(home)
    return EndpointGCSHook(endpoint, token=token)


def local_gcs_client(home: str) -> EndpointClient:
    """The same storage client for a local target home's GCS, without GCSHook's module (checkpoint listings)."""
    from mtc_provider.adapters.gcs_endpoint import EndpointClient

    endpoint, token = _endpoint_and_token(home)
    return EndpointClient(endpoint, token=token)


def _endpoint_and_token(home: str) -> tuple[str, str]:
    endpoint = local_gcs_endpoint(home)
    try:
        return endpoint, require_token(Path(home).expanduser().resolve())
    except TokenError as err:
        raise ApiError(401, f"the local GCS token of {home}: {err}", "Unauthorized") from None


def local_gcs_endpoint(home: str) -> str:
    """The endpoint of a local target home's GCS, started in the background when it is not running, as a
    process (`python -m mtc_local.gcs up`). A process's first look reads the endpoint the running server wrote
    (`<home>/gcs/server.json`) and checks it holds the home's token: one request, not a Python process."""
    from mtc_local.gcs.lifecycle import read_server_file
    from mtc_provider.adapters.gcs_endpoint import DEFAULT_IDLE_SECONDS, IDLE_ENV

    home = str(Path(home).expanduser().resolve())
    idle = os.environ.get(IDLE_ENV) or str(DEFAULT_IDLE_SECONDS)
    endpoint, checked = _local_endpoints.get(home, ("", 0.0))
    if endpoint and time.monotonic() - checked < min(FRESH_SECONDS, float(idle) / 4):
        return endpoint
    endpoint = endpoint or (read_server_file(home) or {}).get("endpoint", "")
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


class LocalBucketCheckpointStore(FinalizedSteps):
    """A checkpoint directory inside a local target's bucket folder, listed through the home's local GCS by
    GcsCheckpointStore (the GKE code path: matchGlob, startOffset, pages, error mapping) with the client GCSHook
    would make (local_gcs_client). Paths in and out stay the local paths the caller uses. The endpoint is looked up
    (and the server started) on each call, in the calling thread, so a trigger never blocks its event loop on it
    and a restarted server is found again; the lookup health-checks the server at most every few seconds
    (local_gcs_endpoint); the home's token is read when the client is made (a trigger carries only the checkpoint
    directory)."""

    def __init__(self, home: str, bucket: str) -> None:
        self.home, self.bucket = home, bucket
        self.root = Path(home) / "buckets" / bucket
        self.gcs: GcsCheckpointStore | None = None

    @property
    def cost(self) -> ListingCost:
        return self._store().cost

    def _store(self) -> GcsCheckpointStore:
        endpoint = local_gcs_endpoint(self.home)
        if self.gcs is None or self.gcs.hook.api_endpoint != endpoint:
            cost = self.gcs.cost if self.gcs is not None else ListingCost()
            self.gcs = GcsCheckpointStore(hook=local_gcs_client(self.home))  # with the home's token, read here
            self.gcs.cost = cost
        if not self.root.is_dir():  # before the workload's first write, as its folder would be made by it
            self._create_bucket()
        return self.gcs

    def _create_bucket(self) -> None:
        """The local bucket, made through the API (HNS, uniform access) when sensing starts before training."""
        from mtc_provider.adapters.gcs_bucket import LOCAL_LOCATION, GcsBucketApi
        from mtc_provider.adapters.gcs_endpoint import LOCAL_PROJECT
        from mtc_provider.core.definition.description.spec import BucketSpec

        GcsBucketApi(self.gcs.hook.get_conn()).ensure_bucket(BucketSpec(self.bucket, LOCAL_LOCATION), LOCAL_PROJECT)

    # The GCS view of this folder, for writers beside the checkpoints (adapters.run_records reads these three).
    def gcs_view(self) -> GcsCheckpointStore:
        return self._store()

    def to_gcs_uri(self, path: str) -> str:
        return self._gs(path)

    def from_gcs_uri(self, uri: str) -> str:
        return self._local(uri)

    def _gs(self, path: str) -> str:
        relative = local_path(path).relative_to(self.root).as_posix()
        return f"gs://{self.bucket}" + ("" if relative == "." else f"/{relative}")

    def _local(self, uri: str) -> str:
        _, path = split_gcs_uri(uri)
        return str(self.root / path) if path else str(self.root)

    def finalized(self, checkpoint_dir: str, after: int | None = None) -> list[CheckpointInfo]:
        found = self._store().finalized(self._gs(checkpoint_dir), after)
        return [CheckpointInfo(info.step, self._local(info.path), info.commit_time) for info in found]

    def item_path(self, step_path: str) -> str | None:
        found = self._store().item_path(self._gs(step_path))
        return self._local(found) if found else None

    def newest_backup(self, backup_dir: str, nodes: int) -> int | None:
        return self._store().newest_backup(self._gs(backup_dir), nodes)


def local_bucket_of(path: Path) -> tuple[str, str] | None:
    """(home, bucket) when `path` lies in a local target's bucket folder `<home>/buckets/<bucket>/...`: a home
    with a local GCS directory (`<home>/gcs`) first, else the outermost `buckets` folder; None otherwise."""
    parts = path.parts
    found = [i for i in range(1, len(parts) - 1) if parts[i] == "buckets"]
    served = [i for i in found if (Path(*parts[:i]) / "gcs").is_dir()]
    for i in served or found:
        return str(Path(*parts[:i])), parts[i + 1]
    return None
