"""The local GCS (mtc_local.gcs) driven by the real google-cloud-storage client and GCSHook, over files
written straight into the bucket folder as the workload writes them. Each behaviour is the GCS JSON API's:
https://cloud.google.com/storage/docs/json_api/v1 (pages cited per test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from google.api_core import exceptions
from google.api_core.iam import Policy
from google.cloud import storage
from google.oauth2.credentials import Credentials

from mtc_provider.adapters.gcs_bucket import GcsBucketApi
from mtc_local.target.gcs import local_gcs_hook
from mtc_provider.adapters.gcs_hook import EndpointGCSHook
from mtc_provider.core.basics.errors import BucketNotUsable
from mtc_provider.core.definition.description.spec import BucketSpec
from mtc_local import gcs as local_gcs
from mtc_local.gcs.lifecycle import _alive
from mtc_local.gcs.server import LocalGcs

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(tmp_path):
    with LocalGcs(tmp_path) as gcs:
        yield gcs


@pytest.fixture
def client(server) -> storage.Client:
    return storage.Client(project="proj", credentials=Credentials(token=server.token.decode()),
                          client_options={"api_endpoint": server.endpoint})


def authorized(server, path: str) -> urllib.request.Request:
    return urllib.request.Request(f"{server.endpoint}{path}", headers={"Authorization": f"Bearer {server.token.decode()}"})


def write(home: Path, bucket: str, name: str, data: bytes = b"x") -> None:
    path = home / "buckets" / bucket / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def hns_bucket(client: storage.Client, name: str = "ckpt", location: str = "us-central1") -> storage.Bucket:
    bucket = client.bucket(name)
    bucket.iam_configuration.uniform_bucket_level_access_enabled = True
    bucket.hierarchical_namespace_enabled = True
    bucket.create(location=location)
    return bucket


# ---- buckets: https://cloud.google.com/storage/docs/json_api/v1/buckets/insert -----------------------------------
def test_bucket_with_hns_and_ubla_is_created_once_and_read_back(client, tmp_path):
    hns_bucket(client)
    got = client.get_bucket("ckpt")
    assert got.hierarchical_namespace_enabled and got.iam_configuration.uniform_bucket_level_access_enabled
    assert got.location == "US-CENTRAL1" and (tmp_path / "buckets" / "ckpt").is_dir()
    with pytest.raises(exceptions.Conflict, match="already own it"):
        hns_bucket(client)


def test_hns_without_uniform_access_is_refused_and_a_missing_bucket_is_404_with_gcs_body(client, server):
    bucket = client.bucket("plain")
    bucket.hierarchical_namespace_enabled = True
    with pytest.raises(exceptions.BadRequest, match="uniform bucket-level access"):
        bucket.create(location="us-central1")
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(authorized(server, "/storage/v1/b/missing"))
    body = json.loads(raised.value.read())
    assert raised.value.code == 404
    assert body["error"]["code"] == 404 and body["error"]["errors"][0]["reason"] == "notFound"


def test_provider_bucket_api_creates_then_accepts_and_refuses_a_bucket_without_hns(client):
    api = GcsBucketApi(client)
    assert api.ensure_bucket(BucketSpec("ckpt", "us-central1"), "proj").created
    again = api.ensure_bucket(BucketSpec("ckpt", "us-central1"), "proj")
    assert not again.created and again.hierarchical_namespace and again.uniform_bucket_level_access
    client.bucket("flat").create(location="us-central1")
    with pytest.raises(BucketNotUsable, match="hierarchical namespace is off"):
        api.ensure_bucket(BucketSpec("flat", "us-central1"), "proj")


# ---- IAM: https://cloud.google.com/storage/docs/json_api/v1/buckets/setIamPolicy, /iam/docs/policies#etag ---------
def test_stale_policy_etag_is_refused_and_the_provider_rereads(client):
    bucket = hns_bucket(client)
    first = bucket.get_iam_policy(requested_policy_version=3)
    second = bucket.get_iam_policy(requested_policy_version=3)
    first["roles/storage.objectViewer"] = {"user:a@example.com"}
    bucket.set_iam_policy(first)
    second["roles/storage.objectViewer"] = {"user:b@example.com"}
    with pytest.raises(exceptions.PreconditionFailed, match="etag"):
        bucket.set_iam_policy(second)  # read before the first write: its etag is stale
    result = GcsBucketApi(client).grant("ckpt", "roles/storage.objectUser", ["principal://x/ns/a/sa/b"])
    policy = bucket.get_iam_policy(requested_policy_version=3)
    assert result.added == ["principal://x/ns/a/sa/b"] and policy["roles/storage.objectViewer"] == {"user:a@example.com"}
    assert policy.etag != first.etag


def test_conditional_bindings_need_policy_version_3(client):
    bucket = hns_bucket(client)
    policy = bucket.get_iam_policy(requested_policy_version=3)
    policy.version = 3
    policy.bindings.append({"role": "roles/storage.objectUser", "members": {"user:a@example.com"},
                            "condition": {"title": "t", "expression": "true"}})
    bucket.set_iam_policy(policy)
    with pytest.raises(exceptions.BadRequest, match="optionsRequestedPolicyVersion=3"):
        bucket.get_iam_policy(requested_policy_version=1)
    assert bucket.get_iam_policy(requested_policy_version=3).version == 3
    bad = Policy.from_api_repr({"bindings": [{"role": "roles/x", "members": ["nobody"]}]})
    with pytest.raises(exceptions.BadRequest, match="Invalid members"):
        bucket.set_iam_policy(bad)


# ---- objects.list: https://cloud.google.com/storage/docs/json_api/v1/objects/list --------------------------------
def test_listing_pages_of_1000_over_files_the_workload_wrote(client, server, tmp_path):
    hns_bucket(client)
    for step in range(1, 2101):
        write(tmp_path, "ckpt", f"run/checkpoints/{step}/commit_success.txt")
        write(tmp_path, "ckpt", f"run/checkpoints/{step}/default/d/0")
    server.reset()
    names = [b.name for b in client.list_blobs("ckpt", prefix="run/checkpoints/",
                                               match_glob="run/checkpoints/*/commit_success.txt")]
    assert len(names) == 2100 and names == sorted(names)
    assert [s.entries for s in server.listings()] == [1000, 1000, 100]
    assert all(n.endswith("/commit_success.txt") for n in names)
    server.reset()
    everything = list(client.list_blobs("ckpt", prefix="run/", max_results=2500, page_size=700))
    assert len(everything) == 2500 and [s.entries for s in server.listings()] == [700, 700, 700, 400]


def test_prefix_delimiter_start_offset_and_glob(client, tmp_path):
    hns_bucket(client)
    for name in ("a/1", "a/2/x", "a/3/y", "a/3/z", "b/1", "top", "a/10/commit_success.txt", "a/9/commit_success.txt"):
        write(tmp_path, "ckpt", name)
    listing = client.list_blobs("ckpt", prefix="a/", delimiter="/")
    assert [b.name for b in listing] == ["a/1"]
    assert sorted(listing.prefixes) == ["a/10/", "a/2/", "a/3/", "a/9/"]
    root = client.list_blobs("ckpt", delimiter="/")
    assert [b.name for b in root] == ["top"] and sorted(root.prefixes) == ["a/", "b/"]
    assert [b.name for b in client.list_blobs("ckpt", prefix="a/", start_offset="a/3/z")] == [
        "a/3/z", "a/9/commit_success.txt"]  # inclusive, lexicographic
    assert [b.name for b in client.list_blobs("ckpt", prefix="a/", match_glob="a/?/commit_success.txt")] == [
        "a/9/commit_success.txt"]
    assert [b.name for b in client.list_blobs("ckpt", match_glob="**/{x,y}")] == ["a/2/x", "a/3/y"]


def test_delimiter_prefixes_count_toward_pages_and_are_not_repeated(client, tmp_path, server):
    hns_bucket(client)
    for i in range(1500):
        write(tmp_path, "ckpt", f"d/{i:04}/a")
        write(tmp_path, "ckpt", f"d/{i:04}/b")
    server.reset()
    listing = client.list_blobs("ckpt", prefix="d/", delimiter="/")
    assert list(listing) == [] and len(listing.prefixes) == 1500
    assert [s.entries for s in server.listings()] == [1000, 500]


# ---- media: https://cloud.google.com/storage/docs/uploads-downloads -----------------------------------------------
def test_uploads_and_downloads_simple_multipart_resumable_and_through_gcshook(client, server, tmp_path):
    hns_bucket(client)
    bucket = client.bucket("ckpt")
    bucket.blob("small.txt").upload_from_string(b"hello")  # multipart
    big = os.urandom(9 * 1024 * 1024)  # above the client's 8 MiB multipart limit: a resumable upload
    (tmp_path / "big.bin").write_bytes(big)
    bucket.blob("dir/big.bin").upload_from_filename(str(tmp_path / "big.bin"))
    chunked = bucket.blob("chunked.bin", chunk_size=256 * 1024)
    chunked.upload_from_string(big[:1_000_000])
    assert (tmp_path / "buckets" / "ckpt" / "dir" / "big.bin").read_bytes() == big  # the object IS the file
    assert bucket.blob("dir/big.bin").download_as_bytes() == big  # crc32c/md5 checked by the client
    assert bucket.blob("chunked.bin").download_as_bytes(start=10, end=19) == big[10:20]
    hook = EndpointGCSHook(server.endpoint, token=server.token.decode())
    hook.upload("ckpt", "goodput/chart.png", data=b"\x89PNG", mime_type="image/png")
    assert hook.download("ckpt", "goodput/chart.png") == b"\x89PNG"
    assert hook.exists("ckpt", "small.txt") and not hook.exists("ckpt", "nope")
    assert sorted(hook.list("ckpt")) == ["chunked.bin", "dir/big.bin", "goodput/chart.png", "small.txt"]
    hook.delete("ckpt", "small.txt")
    assert not (tmp_path / "buckets" / "ckpt" / "small.txt").exists()
    with pytest.raises(exceptions.NotFound):
        bucket.blob("small.txt").download_as_bytes()


def test_generation_precondition_and_unusable_names(client):
    bucket = hns_bucket(client)
    bucket.blob("once").upload_from_string(b"1", if_generation_match=0)
    with pytest.raises(exceptions.PreconditionFailed):
        bucket.blob("once").upload_from_string(b"2", if_generation_match=0)
    with pytest.raises(exceptions.BadRequest, match="not usable"):
        bucket.blob("../escape").upload_from_string(b"x")


# ---- listing outages (faults.py): https://cloud.google.com/storage/docs/json_api/v1/status-codes -------------------
@pytest.mark.parametrize("status, error", [(403, exceptions.Forbidden), (429, exceptions.TooManyRequests),
                                           (503, exceptions.ServiceUnavailable)])
def test_listing_outage_from_the_control_file_fails_only_listings(client, tmp_path, status, error):
    hns_bucket(client)
    write(tmp_path, "ckpt", "run/1/commit_success.txt")
    local_gcs.fail_listings(tmp_path, status, 30, prefix="run/")
    with pytest.raises(error):
        list(client.list_blobs("ckpt", prefix="run/", retry=None))
    assert [b.name for b in client.list_blobs("ckpt", prefix="other/")] == []  # outside the prefix: works
    assert client.bucket("ckpt").blob("run/1/commit_success.txt").download_as_bytes() == b"x"
    local_gcs.clear_faults(tmp_path)
    assert [b.name for b in client.list_blobs("ckpt", prefix="run/")] == ["run/1/commit_success.txt"]


# ---- lifecycle ------------------------------------------------------------------------------------------------------
def test_two_processes_at_once_start_one_server_and_stop_ends_it(tmp_path):
    code = "import sys; from mtc_local.gcs import ensure_running; print(ensure_running(sys.argv[1]))"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    endpoints = {p.communicate(timeout=60)[0].strip() for p in procs}
    try:
        assert len(endpoints) == 1 and local_gcs.ensure_running(tmp_path) in endpoints
        info = json.loads((tmp_path / "gcs" / "server.json").read_text())
        assert info["endpoint"] in endpoints and info["endpoint"].startswith("http://127.0.0.1:")
        local_gcs_hook(str(tmp_path)).get_conn().create_bucket("made")
        assert (tmp_path / "buckets" / "made").is_dir()
    finally:
        assert local_gcs.stop(tmp_path)
    assert local_gcs.endpoint(tmp_path) is None and not local_gcs.stop(tmp_path)
    assert not _alive(info["pid"])  # gone, or a zombie waiting for init to reap it
