"""The one GCS double: the GCS JSON API's buckets, bucket IAM and object listings, as Google documents them.

What gcp-storage-emulator (tests/doubles/emulator.py, for real object reads and writes) does not do:
- buckets.insert/get (https://cloud.google.com/storage/docs/json_api/v1/buckets): hierarchicalNamespace and
  iamConfiguration kept as sent, projectNumber; a name held by another project (`foreign`) answers 403 on get and
  409 on insert;
- getIamPolicy honouring optionsRequestedPolicyVersion, setIamPolicy as compare-and-set on the etag (stale etag ->
  412, or 409 with `conflict_status`) (https://cloud.google.com/storage/docs/json_api/v1/buckets/setIamPolicy);
- objects.list over names seeded in memory (`seed`), with the local GCS's own listing (mtc_local.gcs.listing):
  `prefix`, `delimiter`, `startOffset` (inclusive), `endOffset` (exclusive), `matchGlob`, `maxResults` at most 1,000
  with `nextPageToken` / `pageToken` (https://cloud.google.com/storage/docs/json_api/v1/objects/list); every listing
  answered is kept in `listings` (path, parameters, items returned), which `reset()` clears.
The emulator answers every listing in one response and ignores `startOffset`, so listing counts against it are
models, not observations; against this double they are observations.
Does not model: object reads and writes, ACLs, conditions evaluation, retention, real location validation.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from mtc_local.gcs.listing import list_page

from tests.doubles.google import GoogleApiDouble
from tests.doubles.http import HttpError, match

CREATED = "2026-11-30T00:00:00.000Z"


@dataclass
class Listing:
    path: str
    params: dict[str, str]
    items: int

class GcsDouble(GoogleApiDouble):
    def __init__(self, project_number: str = "123456789012", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.buckets: dict[str, dict[str, Any]] = {}
        self.policies: dict[str, dict[str, Any]] = {}
        self.foreign: set[str] = set()
        self.project_number = project_number
        self.conflict_status = 412
        self.policy_writes = 0
        self.bucket_writes = 0
        self.names: dict[str, list[str]] = {}  # bucket -> sorted object names
        self.listings: list[Listing] = []

    def seed(self, bucket: str, names: list[str]) -> None:
        """Objects named `names` in `bucket` (made if missing): what a listing returns."""
        with self.lock:
            if bucket not in self.buckets:
                self.add_bucket(bucket)
            self.names[bucket] = sorted(set(self.names.get(bucket, [])) | set(names))

    def reset(self) -> None:
        with self.lock:
            self.listings.clear()
            self.requests.clear()

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
        if (m := match(r"/storage/v1/b/(?P<b>[^/]+)/o/?", path)) and method == "GET":
            return 200, self._list(path, self._bucket(unquote(m["b"]))["name"], query)
        if (m := match(r"/storage/v1/b/(?P<b>[^/]+)", path)) and method == "GET":
            return 200, copy.deepcopy(self._bucket(m["b"]))
        raise HttpError(404, f"no route for {method} {path}")

    def _list(self, path: str, bucket: str, query: dict[str, list[str]]) -> dict[str, Any]:
        params = {key: values[-1] for key, values in query.items()}
        page = list_page(self.names.get(bucket, []), params)
        items = [{"kind": "storage#object", "name": name, "bucket": bucket, "generation": "1", "size": "1",
                  "timeCreated": CREATED, "updated": CREATED} for name in page.items]
        answer: dict[str, Any] = {"kind": "storage#objects", "items": items}
        if page.prefixes:
            answer["prefixes"] = page.prefixes
        if page.next_page_token:
            answer["nextPageToken"] = page.next_page_token
        self.listings.append(Listing(path, params, len(items)))
        return answer

    def _bucket(self, name: str) -> dict[str, Any]:
        if name in self.foreign:
            raise HttpError(403, f"sa@proj.iam.gserviceaccount.com does not have storage.buckets.get access to the "
                                 f"Google Cloud Storage bucket {name}.", "forbidden")
        if name not in self.buckets:
            raise HttpError(404, "The specified bucket does not exist.", "notFound")
        return self.buckets[name]
