"""Fake GCS JSON API for what gcp-storage-emulator drops: HNS, UBLA, projectNumber and IAM policy v3 with etags.

Models: buckets.insert/get (hierarchicalNamespace and iamConfiguration kept as sent; a name held by
another project answers 403 on get and 409 on insert), getIamPolicy honouring optionsRequestedPolicyVersion,
setIamPolicy as compare-and-set on the etag (stale etag -> 412, or 409 with `conflict_status`).
Does not model: objects, ACLs, conditions evaluation, retention, real location validation.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.doubles.base import FakeServer, HttpError, match


class FakeGcsServer(FakeServer):
    def __init__(self, project_number: str = "123456789012", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.buckets: dict[str, dict[str, Any]] = {}
        self.policies: dict[str, dict[str, Any]] = {}
        self.foreign: set[str] = set()
        self.project_number = project_number
        self.conflict_status = 412
        self.policy_writes = 0
        self.bucket_writes = 0

    def add_bucket(self, name: str, location: str = "US-CENTRAL1", hns: bool = True, ubla: bool = True) -> None:
        self.buckets[name] = {"kind": "storage#bucket", "id": name, "name": name, "location": location.upper(),
                              "projectNumber": self.project_number, "storageClass": "STANDARD",
                              "hierarchicalNamespace": {"enabled": hns},
                              "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": ubla}}}
        self.policies[name] = {"kind": "storage#policy", "resourceId": f"projects/_/buckets/{name}", "version": 1,
                               "etag": "CAE=", "bindings": [{"role": "roles/storage.legacyBucketOwner",
                                                             "members": ["projectOwner:proj"]}]}

    def bump(self, name: str) -> None:
        """Someone else changed the policy: the etag a client holds goes stale."""
        policy = self.policies[name]
        policy["etag"] = f"E{int(policy['etag'][1:] if policy['etag'].startswith('E') else 1) + 1}"

    def route(self, method: str, path: str, query: dict, body: Any) -> tuple[int, Any]:
        if path == "/storage/v1/b" and method == "POST":
            name = body["name"]
            if name in self.foreign:
                raise HttpError(409, "The requested bucket name is not available. The bucket namespace is shared by "
                                     "all users of the system. Please select a different name and try again.", "conflict")
            if name in self.buckets:
                raise HttpError(409, "Your previous request to create the named bucket succeeded and you already "
                                     "own it.", "conflict")
            self.bucket_writes += 1
            self.add_bucket(name, body.get("location", "US"),
                            bool((body.get("hierarchicalNamespace") or {}).get("enabled")),
                            bool(((body.get("iamConfiguration") or {}).get("uniformBucketLevelAccess") or {}).get("enabled")))
            return 200, copy.deepcopy(self.buckets[name])
        if (m := match(r"/storage/v1/b/(?P<b>[^/]+)/iam", path)):
            name = self._bucket(m["b"])["name"]
            policy = self.policies[name]
            if method == "GET":
                requested = int((query.get("optionsRequestedPolicyVersion") or ["1"])[0])
                return 200, {**copy.deepcopy(policy), "version": 3 if requested >= 3 else 1}
            if body.get("etag") and body["etag"] != policy["etag"]:
                raise HttpError(self.conflict_status, "Precondition Failed: the policy was changed concurrently",
                                "conditionNotMet")
            self.policy_writes += 1
            self.policies[name] = {**policy, "bindings": body.get("bindings", []), "version": body.get("version", 1)}
            self.bump(name)
            return 200, copy.deepcopy(self.policies[name])
        if (m := match(r"/storage/v1/b/(?P<b>[^/]+)", path)) and method == "GET":
            return 200, copy.deepcopy(self._bucket(m["b"]))
        raise HttpError(404, f"no route for {method} {path}")

    def _bucket(self, name: str) -> dict[str, Any]:
        if name in self.foreign:
            raise HttpError(403, f"sa@proj.iam.gserviceaccount.com does not have storage.buckets.get access to the "
                                 f"Google Cloud Storage bucket {name}.", "forbidden")
        if name not in self.buckets:
            raise HttpError(404, "The specified bucket does not exist.", "notFound")
        return self.buckets[name]
