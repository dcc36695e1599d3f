"""The checkpoint bucket: create it with HNS and UBLA, verify an existing one, and bind the guide's IAM members.

The storage client is injected (production: the google provider's GCSHook.get_conn(), made by adapters/gcs_hook.py:
on GCP with the connection's credentials, on the local target against its local GCS). Client-library retries are
turned off (`retry=None`) so the one policy in adapters/retry.py decides.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from google.cloud import storage
from google.api_core.iam import Policy

from mtc_provider.adapters import retry
from mtc_provider.adapters.protocols import AlreadyExists, NotFound
from mtc_provider.core.basics.errors import BucketNotUsable
from mtc_provider.core.definition.cluster.readiness import add_members
from mtc_provider.core.definition.description.spec import BucketSpec

log = logging.getLogger(__name__)
TIMEOUT = 60.0


@dataclass(frozen=True)
class BucketResult:
    name: str
    created: bool
    location: str
    hierarchical_namespace: bool
    uniform_bucket_level_access: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class GrantResult:
    bucket: str
    role: str
    added: list[str] = field(default_factory=list)
    already_present: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added)

    def to_dict(self) -> dict[str, Any]:
        return {"bucket": self.bucket, "role": self.role, "added": self.added,
                "already_present": self.already_present, "changed": self.changed}


def _describe(bucket: storage.Bucket) -> tuple[str, bool, bool]:
    props = bucket._properties  # the JSON resource as the server sent it
    hns = bool((props.get("hierarchicalNamespace") or {}).get("enabled"))
    ubla = bool(((props.get("iamConfiguration") or {}).get("uniformBucketLevelAccess") or {}).get("enabled"))
    return str(props.get("location", "")).lower(), hns, ubla


@dataclass
class GcsBucketApi:
    client: storage.Client

    def ensure_bucket(self, spec: BucketSpec, project_id: str) -> BucketResult:
        """Create with HNS + UBLA, or accept an existing bucket only when it already has both and the location."""
        existing = self._get(spec.name)
        if existing is None:
            bucket = self.client.bucket(spec.name)
            bucket.iam_configuration.uniform_bucket_level_access_enabled = True
            bucket.hierarchical_namespace_enabled = True  # HNS can only be chosen at creation
            try:
                retry.call(bucket.create, project=project_id, location=spec.location, retry=None, timeout=TIMEOUT,
                           permission="storage.buckets.create")
            except (AlreadyExists, retry.Conflict):
                existing = self._get(spec.name)  # created concurrently, or a name another project holds
                if existing is None:
                    raise
            else:
                location, hns, ubla = _describe(bucket)
                return BucketResult(spec.name, True, location or spec.location, hns, ubla)
        return self._verify(existing, spec)

    def _get(self, name: str) -> storage.Bucket | None:
        try:
            return retry.call(self.client.get_bucket, name, retry=None, timeout=TIMEOUT, permission="storage.buckets.get")
        except NotFound:
            return None
        except retry.PermissionDenied as exc:
            raise BucketNotUsable(
                f"bucket {name} exists but this identity cannot read it (storage.buckets.get): it probably "
                f"belongs to another project; choose another bucket name. Server: {exc}"
            ) from exc

    @staticmethod
    def _verify(bucket: storage.Bucket, spec: BucketSpec) -> BucketResult:
        location, hns, ubla = _describe(bucket)
        problems = []
        if not hns:
            problems.append("hierarchical namespace is off and cannot be enabled on an existing bucket: "
                            "create a new bucket (gcloud storage buckets create gs://NAME --location=... "
                            "--hierarchical-namespace)")
        if not ubla:
            problems.append("uniform bucket-level access is off (gcloud storage buckets update gs://"
                            f"{spec.name} --uniform-bucket-level-access)")
        if location != spec.location.lower():
            problems.append(f"location is {location}, expected {spec.location}")
        if problems:
            raise BucketNotUsable(f"bucket {spec.name} exists but " + "; ".join(problems))
        return BucketResult(spec.name, False, location, hns, ubla)

    def grant(self, bucket_name: str, role: str, members: list[str]) -> GrantResult:
        """Read-modify-write of the v3 policy with its etag; a concurrent change (409/412) re-reads and retries."""
        bucket = self.client.bucket(bucket_name)

        def once() -> GrantResult:
            policy = retry.call(bucket.get_iam_policy, requested_policy_version=3, retry=None, timeout=TIMEOUT,
                                permission="storage.buckets.getIamPolicy")
            new, added, already = add_members(policy.to_api_repr(), role, members)
            if added:
                retry.call(bucket.set_iam_policy, Policy.from_api_repr(new), retry=None, timeout=TIMEOUT,
                           permission="storage.buckets.setIamPolicy")
                log.info("bound %s on gs://%s to %s", role, bucket_name, added)
            return GrantResult(bucket_name, role, added, already)

        return retry.policy((retry.Conflict, retry.PreconditionFailed, AlreadyExists))(once)()


def storage_client(gcp_conn_id: str = "google_cloud_default", impersonation_chain: Any = None,
                   api_endpoint: str | None = None) -> storage.Client:
    from mtc_provider.adapters.gcs_hook import gcs_hook

    return gcs_hook(gcp_conn_id, impersonation_chain, api_endpoint).get_conn()


@dataclass(frozen=True)
class BucketAccess:
    """How a target reaches its buckets (its backend's `bucket()`): the client, the project buckets are created in,
    the default location, and the project number when it is known without a lookup."""

    client: storage.Client
    project_id: str
    location: str
    project_number: str | None = None


LOCAL_LOCATION = "us-central1"  # what the local GCS reports for a bucket folder made without buckets.insert


def project_number(project_id: str, gcp_conn_id: str = "google_cloud_default", impersonation_chain: Any = None,
                   api_endpoint: str | None = None, client: Any = None) -> str:
    """The project's number from the Resource Manager API (projects.get), as the guide's `gcloud projects describe`."""
    from google.cloud import resourcemanager_v3

    if client is None:
        from airflow.providers.google.common.hooks.base_google import GoogleBaseHook

        credentials = GoogleBaseHook(gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain).get_credentials()
        options = {"api_endpoint": api_endpoint} if api_endpoint else None
        client = resourcemanager_v3.ProjectsClient(credentials=credentials, transport="rest", client_options=options)
    project = retry.call(client.get_project, name=f"projects/{project_id}", retry=None, timeout=TIMEOUT,
                         permission="resourcemanager.projects.get")
    return project.name.rsplit("/", 1)[-1]
