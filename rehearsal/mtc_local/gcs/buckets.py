"""The local target's buckets: `<home>/buckets/<bucket>/` folders whose files ARE the objects (the workload writes
them as through a GCS FUSE mount), plus each bucket's metadata and IAM policy in `<home>/gcs/buckets/<bucket>.json`
(outside the folder, so it never shows up as an object).

Resources as the GCS JSON API documents them:
- bucket: https://cloud.google.com/storage/docs/json_api/v1/buckets#resource (`hierarchicalNamespace.enabled`,
  `iamConfiguration.uniformBucketLevelAccess.enabled`; HNS needs UBLA: https://cloud.google.com/storage/docs/hns-overview);
- object: https://cloud.google.com/storage/docs/json_api/v1/objects#resource (a file's mtime is its creation time and
  generation, as the file is written once);
- policy: https://cloud.google.com/storage/docs/json_api/v1/buckets/getIamPolicy (etag; version 3 with conditions,
  https://cloud.google.com/iam/docs/policies#versions).
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from mtc_local.gcs import errors
from mtc_local.gcs.listing import glob_depth

DEFAULT_LOCATION = "US-CENTRAL1"  # the location a bucket folder made without buckets.insert reports
MEMBER_PREFIXES = ("user:", "serviceAccount:", "group:", "domain:", "principal:", "principalSet:", "projectOwner:",
                   "projectEditor:", "projectViewer:", "deleted:")
MEMBER_WORDS = ("allUsers", "allAuthenticatedUsers")


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def policy_etag(revision: int) -> str:
    """An etag shaped like GCS's (base64 of a small protobuf varint: 'CAE=' is revision 1)."""
    out, n = bytearray(b"\x08"), revision
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            break
    return base64.b64encode(bytes(out)).decode()


# What a bucket folder can be named: GCS's bucket name characters
# (https://cloud.google.com/storage/docs/buckets#naming), so no name is a path ('/', '..') or has a NUL.
BUCKET_NAME = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,220}[a-z0-9])?\Z")
# Characters no object name or prefix may carry here: NUL cannot be in a file name; GCS refuses CR and LF
# (https://cloud.google.com/storage/docs/objects#naming).
FORBIDDEN_CHARACTERS = ("\0", "\r", "\n")
NAMING = "no empty, '.' or '..' path segments, no leading '/', no NUL, CR or LF"


def check_bucket_name(bucket: str) -> str:
    if not isinstance(bucket, str) or not BUCKET_NAME.match(bucket) or ".." in bucket:
        raise errors.invalid(f"Invalid bucket name: {bucket!r} (lowercase letters, digits, '-', '_' and '.', "
                             "starting and ending with a letter or digit)")
    return bucket


def _bad_characters(value: str) -> bool:
    return any(c in value for c in FORBIDDEN_CHARACTERS)


def check_object_name(name: str) -> str:
    """A name that is a safe relative path under the folder (GCS allows more; a folder cannot hold them)."""
    parts = name.split("/")
    if (not name or name.startswith("/") or _bad_characters(name)
            or any(p in ("", ".", "..") for p in parts[:-1]) or parts[-1] in (".", "..")):
        raise errors.invalid(f"Object name {name!r} is not usable on the local target's bucket folder ({NAMING})")
    if len(name.encode()) > 1024:
        raise errors.invalid("The maximum object length is 1024 characters, but got a name with more.")
    return name


def check_prefix(prefix: str) -> str:
    """A listing prefix whose folder part (up to its last '/') is a safe relative path under the bucket folder."""
    folders = prefix[:prefix.rfind("/") + 1]
    if prefix.startswith("/") or _bad_characters(prefix) or any(p in ("", ".", "..") for p in folders.split("/")[:-1]):
        raise errors.invalid(f"Invalid prefix {prefix!r}: not usable on the local target's bucket folder ({NAMING})")
    return prefix


def inside(folder: Path, path: Path, what: str) -> Path:
    """`path`, when it resolves (symbolic links followed) inside `folder`; 400 naming it otherwise."""
    if not path.resolve().is_relative_to(folder.resolve()):
        raise errors.invalid(f"{what} resolves outside its bucket folder; refused")
    return path


class FolderBuckets:
    def __init__(self, home: str | Path, default_location: str = DEFAULT_LOCATION) -> None:
        self.home = Path(home)
        self.root = self.home / "buckets"
        self.meta_dir = self.home / "gcs" / "buckets"
        self.tmp_dir = self.home / "gcs" / "tmp"
        self.default_location = default_location
        self._lock = threading.Lock()

    # ---- buckets -------------------------------------------------------------------------------------------
    def folder(self, bucket: str) -> Path:
        return self.root / check_bucket_name(bucket)

    def _meta_path(self, bucket: str) -> Path:
        return self.meta_dir / f"{check_bucket_name(bucket)}.json"

    def _read_meta(self, bucket: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._meta_path(bucket).read_text())
        except FileNotFoundError:
            return None

    def _write_meta(self, bucket: str, meta: dict[str, Any]) -> None:
        self.meta_dir.mkdir(parents=True, exist_ok=True)
        tmp = self._meta_path(bucket).with_suffix(f".{uuid.uuid4().hex}.tmp")
        tmp.write_text(json.dumps(meta, indent=1))
        os.replace(tmp, self._meta_path(bucket))

    def _meta(self, bucket: str) -> dict[str, Any]:
        """The bucket's metadata; a folder made without buckets.insert (by the workload) gets the defaults."""
        meta = self._read_meta(bucket)
        if meta is not None:
            return meta
        folder = self.folder(bucket)
        if not folder.is_dir():
            raise errors.bucket_not_found(bucket)
        return self._new_meta(bucket, "local", self.default_location, True, True, folder.stat().st_mtime)

    @staticmethod
    def _new_meta(bucket: str, project: str, location: str, ubla: bool, hns: bool, created: float) -> dict[str, Any]:
        resource = {
            "kind": "storage#bucket", "id": bucket, "name": bucket, "projectNumber": "0", "metageneration": "1",
            "location": location.upper(), "locationType": "region", "storageClass": "STANDARD",
            "timeCreated": rfc3339(created), "updated": rfc3339(created), "etag": "CAE=",
            "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": ubla, **({"lockedTime": rfc3339(created + 90 * 86400)} if ubla else {})},
                                 "bucketPolicyOnly": {"enabled": ubla}},
            "hierarchicalNamespace": {"enabled": hns},
        }
        # A new bucket's policy: the project's legacy roles (https://cloud.google.com/storage/docs/access-control/iam-roles)
        bindings = [{"role": "roles/storage.legacyBucketOwner", "members": [f"projectEditor:{project}", f"projectOwner:{project}"]},
                    {"role": "roles/storage.legacyBucketReader", "members": [f"projectViewer:{project}"]}]
        return {"resource": resource, "policy": {"bindings": bindings, "revision": 1}}

    def insert(self, project: str, body: dict[str, Any]) -> dict[str, Any]:
        from mtc_provider.core.basics.errors import SpecError
        from mtc_provider.core.definition.description.locations import check_bucket_name

        name = body.get("name") or ""
        try:
            check_bucket_name(name, "name")
        except SpecError as exc:
            raise errors.invalid(f"Invalid bucket name: {name!r} ({exc})") from None
        ubla = bool(((body.get("iamConfiguration") or {}).get("uniformBucketLevelAccess") or {}).get("enabled"))
        hns = bool((body.get("hierarchicalNamespace") or {}).get("enabled"))
        if hns and not ubla:
            raise errors.invalid("Hierarchical namespace buckets require uniform bucket-level access to be enabled.")
        import time

        with self._lock:
            if self._read_meta(name) is not None or self.folder(name).exists():
                raise errors.bucket_conflict()
            meta = self._new_meta(name, project or "local", body.get("location") or "US", ubla, hns, time.time())
            self.folder(name).mkdir(parents=True)
            self._write_meta(name, meta)
        return meta["resource"]

    def get(self, bucket: str) -> dict[str, Any]:
        return self._meta(bucket)["resource"]

    def names(self) -> list[str]:
        found = {p.stem for p in self.meta_dir.glob("*.json")} if self.meta_dir.is_dir() else set()
        found |= {p.name for p in self.root.iterdir() if p.is_dir()} if self.root.is_dir() else set()
        return sorted(n for n in found if BUCKET_NAME.match(n))  # a folder no bucket could be named is not one

    # ---- IAM -----------------------------------------------------------------------------------------------
    def get_policy(self, bucket: str, requested_version: int) -> dict[str, Any]:
        policy = self._meta(bucket)["policy"]
        conditional = any("condition" in b for b in policy["bindings"])
        if conditional and requested_version < 3:
            raise errors.invalid("The policy has conditional role bindings: request it with "
                                 "optionsRequestedPolicyVersion=3.")
        return {"kind": "storage#policy", "resourceId": f"projects/_/buckets/{bucket}", "version": 3 if conditional else 1,
                "etag": policy_etag(policy["revision"]), "bindings": policy["bindings"]}

    def set_policy(self, bucket: str, body: dict[str, Any]) -> dict[str, Any]:
        bindings = body.get("bindings") or []
        for binding in bindings:
            role, members = binding.get("role"), binding.get("members")
            if not isinstance(role, str) or not role.startswith(("roles/", "projects/", "organizations/")):
                raise errors.invalid(f"Invalid role {role!r}: a role name such as roles/storage.objectUser")
            if not isinstance(members, list) or not all(
                    isinstance(m, str) and (m in MEMBER_WORDS or m.startswith(MEMBER_PREFIXES)) for m in members):
                raise errors.invalid(f"Invalid members for {role}: {members!r}")
            if "condition" in binding and int(body.get("version") or 1) < 3:
                raise errors.invalid("A policy with conditional role bindings must have version 3.")
        with self._lock:
            meta = self._meta(bucket)
            current = meta["policy"]
            # The etag makes setIamPolicy a compare-and-set: a stale one fails and the caller re-reads
            # (https://cloud.google.com/iam/docs/policies#etag).
            if body.get("etag") and body["etag"] != policy_etag(current["revision"]):
                raise errors.condition_not_met("The etag in the request does not match the policy's current etag: "
                                               "the policy changed since it was read.")
            meta["policy"] = {"bindings": bindings, "revision": current["revision"] + 1}
            self._write_meta(bucket, meta)
        return self.get_policy(bucket, 3)

    # ---- objects -------------------------------------------------------------------------------------------
    def object_path(self, bucket: str, name: str) -> Path:
        folder = self.folder(bucket)
        return inside(folder, folder / check_object_name(name), f"Object name {name!r}")

    def names_under(self, bucket: str, prefix: str, match_glob: str | None = None) -> list[str]:
        """Every object name starting with the prefix's directory part, sorted (what a listing filters)."""
        folder = self.folder(bucket)
        check_prefix(prefix)
        if not folder.is_dir():
            self.get(bucket)  # 404 when the bucket does not exist at all
            return []
        base = prefix[:prefix.rfind("/") + 1]
        start = inside(folder, folder / base, f"Prefix {prefix!r}") if base else folder
        depth = glob_depth(match_glob)
        names = list(_walk(start, base, depth))
        names.sort()
        return names

    def object_resource(self, bucket: str, name: str, stat: os.stat_result | None = None,
                        hashes: bool = False) -> dict[str, Any]:
        """The object's resource; with `hashes`, its md5Hash and crc32c too (they read the whole file)."""
        if stat is None:
            try:
                stat = self.object_path(bucket, name).stat()
            except (FileNotFoundError, NotADirectoryError):
                self.get(bucket)
                raise errors.object_not_found(bucket, name) from None
            if not _is_file(stat):
                raise errors.object_not_found(bucket, name)
        generation = str(stat.st_mtime_ns // 1000)
        extra = dict(zip(("md5Hash", "crc32c"), file_hashes(self.object_path(bucket, name)))) if hashes else {}
        return {**extra, "kind": "storage#object", "id": f"{bucket}/{name}/{generation}", "name": name, "bucket": bucket,
                "generation": generation, "metageneration": "1", "contentType": "application/octet-stream",
                "storageClass": "STANDARD", "size": str(stat.st_size), "timeCreated": rfc3339(stat.st_mtime),
                "updated": rfc3339(stat.st_mtime), "etag": base64.b64encode(generation.encode()).decode()}

    def listed_resource(self, bucket: str, name: str) -> dict[str, Any] | None:
        """The resource of a listed name, or None when the file went away between the walk and now."""
        try:
            stat = (self.folder(bucket) / name).lstat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not _is_file(stat):
            return None
        return self.object_resource(bucket, name, stat)

    def write(self, bucket: str, name: str, chunks: Iterator[bytes], if_generation_match: str | None = None) -> dict[str, Any]:
        """Write a whole object: a temporary file outside the folder, then one rename (readers never see half)."""
        self.get(bucket)
        path = self.object_path(bucket, name)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.tmp_dir / uuid.uuid4().hex
        with open(tmp, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
        try:
            with self._lock:
                if if_generation_match is not None:
                    exists = path.is_file()
                    current = str(path.stat().st_mtime_ns // 1000) if exists else "0"
                    if current != if_generation_match:
                        raise errors.condition_not_met()
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                except (FileExistsError, NotADirectoryError):
                    raise errors.invalid(f"Object name {name!r}: a prefix of it is an object on the local folder") from None
                if path.is_dir():
                    raise errors.invalid(f"Object name {name!r} is a folder of other objects on the local folder")
                os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return self.object_resource(bucket, name, hashes=True)

    def delete(self, bucket: str, name: str) -> None:
        self.object_resource(bucket, name)
        self.object_path(bucket, name).unlink(missing_ok=True)


def file_hashes(path: Path) -> tuple[str, str]:
    """(md5, crc32c) of a file, base64 as GCS sends them (`md5Hash`, `crc32c`, and `X-Goog-Hash` on downloads)."""
    import hashlib

    import google_crc32c

    md5, crc = hashlib.md5(), google_crc32c.Checksum()
    with open(path, "rb") as src:
        for chunk in iter(lambda: src.read(1 << 20), b""):
            md5.update(chunk)
            crc.update(chunk)
    return base64.b64encode(md5.digest()).decode(), base64.b64encode(crc.digest()).decode()


def _is_file(stat: os.stat_result) -> bool:
    import stat as st

    return st.S_ISREG(stat.st_mode)


def _walk(directory: Path, relative: str, depth: int | None) -> Iterator[str]:
    """File names under `directory` as object names (`relative` + path); not deeper than `depth` slashes."""
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        name = relative + entry.name
        try:
            if entry.is_dir(follow_symlinks=False):
                if depth is None or name.count("/") < depth:
                    yield from _walk(Path(entry.path), name + "/", depth)
            elif entry.is_file(follow_symlinks=False):  # a link is not an object: it could lead out of the folder
                yield name
        except FileNotFoundError:
            continue
