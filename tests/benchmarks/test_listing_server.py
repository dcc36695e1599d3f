"""The GCS double (tests/doubles/gcs.py, the sensing benchmark's GCS) answers `objects.list` as GCS documents it (paging at 1,000,
startOffset, matchGlob), driven here by the real google-cloud-storage client.
https://cloud.google.com/storage/docs/json_api/v1/objects/list"""

from __future__ import annotations

import pytest
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from tests.doubles.gcs import GcsDouble
from mtc_local.gcs.listing import glob_regex


@pytest.mark.parametrize("glob, name, matches", [
    ("run/*/commit_success.txt", "run/12/commit_success.txt", True),
    ("run/*/commit_success.txt", "run/12/default/commit_success.txt", False),  # * stops at /
    ("run/**.meta", "run/a/b/train-s1-n0-w0.meta", True),  # ** crosses /
    ("run/??/commit_success.txt", "run/7/commit_success.txt", False),  # ? is exactly one character
    ("run/[0-9]{a,b}", "run/3b", True),
    ("run/[0-9]{a,b}", "run/3c", False),
])
def test_match_glob_follows_the_documented_syntax(glob, name, matches):
    assert bool(glob_regex(glob).match(name)) is matches


@pytest.fixture
def client_and_server():
    with GcsDouble() as server:
        server.seed("b", [f"run/{step}/{f}" for step in range(1, 2501) for f in ("commit_success.txt", "d/0")])
        client = storage.Client(project="p", credentials=AnonymousCredentials(),
                                client_options=ClientOptions(api_endpoint=server.url))
        yield client, server


def test_pages_of_1000_and_every_request_counted(client_and_server):
    client, server = client_and_server
    names = [b.name for b in client.list_blobs("b", prefix="run/", match_glob="run/*/commit_success.txt")]
    assert len(names) == 2500 and names == sorted(names)
    assert [listing.items for listing in server.listings] == [1000, 1000, 500]


def test_start_offset_is_inclusive_and_combines_with_the_glob(client_and_server):
    client, server = client_and_server
    server.reset()
    names = [b.name for b in client.list_blobs("b", prefix="run/", start_offset="run/2490",
                                               match_glob="run/????/commit_success.txt")]
    assert names == [f"run/{s}/commit_success.txt" for s in range(2490, 2501)]
    assert len(server.listings) == 1 and server.listings[0].params["startOffset"] == "run/2490"
