"""Who may use the local GCS and what it may touch (issue 23, `local_gcs_auth`): only a caller with the home's
bearer token (the same `<home>/supervisor.token` the local API server takes), and only inside a bucket folder.

Real clients on 127.0.0.1: raw HTTP (urllib), google-cloud-storage (the provider's client, through GCSHook), and
a process of another user (uid 65534) on the same machine. GCS answers a call without credentials 401 with reason
`required`, and one with a bad token 401 `authError` ("Invalid Credentials")
(https://cloud.google.com/storage/docs/json_api/v1/status-codes#401-unauthorized).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.auth.exceptions import InvalidOperation, RefreshError
from google.cloud import storage
from google.oauth2.credentials import Credentials

from mtc_local.target.gcs import local_gcs_hook
from mtc_local.token import read_token
from mtc_local import gcs as local_gcs
from mtc_local.gcs import lifecycle
from mtc_local.gcs.server import LocalGcs

pytestmark = pytest.mark.timeout(120)
COMMIT = "run/checkpoints/5/commit_success.txt"


@pytest.fixture
def home(tmp_path):
    """A home whose local GCS runs as its own process (as `ensure_running` starts it for the provider), with one
    committed checkpoint step in its bucket folder."""
    marker = tmp_path / "buckets" / "ckpt" / COMMIT
    marker.parent.mkdir(parents=True)
    marker.write_bytes(b"")
    local_gcs.ensure_running(tmp_path)
    yield tmp_path
    local_gcs.stop(tmp_path)


def call(endpoint: str, method: str, path: str, token: str | None = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(f"{endpoint}{path}", method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            data = response.read()
            return response.status, json.loads(data) if data else {}
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def token_of(home: Path) -> str:
    return read_token(home).decode()


# ---- local_gcs_auth ---------------------------------------------------------------------------------------------
def test_local_gcs_auth_refuses_a_delete_without_the_homes_token(home):
    """The reported case: a DELETE of commit_success.txt with no credentials answered 204. Now 401, file kept."""
    endpoint = local_gcs.endpoint(home)
    marker = home / "buckets" / "ckpt" / COMMIT
    obj = f"/storage/v1/b/ckpt/o/{urllib.parse.quote(COMMIT, safe='')}"
    status, body = call(endpoint, "DELETE", obj)
    assert status == 401 and body["error"]["errors"][0]["reason"] == "required" and marker.exists()
    status, body = call(endpoint, "DELETE", obj, token="0" * 64)
    assert status == 401 and body["error"]["errors"][0]["reason"] == "authError" and marker.exists()
    status, body = call(endpoint, "GET", "/storage/v1/b/ckpt/o?prefix=run/")
    assert status == 401 and "items" not in body
    assert call(endpoint, "DELETE", obj, token=token_of(home))[0] == 204 and not marker.exists()


def test_local_gcs_auth_refuses_another_user_on_the_machine(home):
    """A process of another user (uid 65534) reaches the port but cannot read the token (0600 in a 0700 home)."""
    endpoint = local_gcs.endpoint(home)
    assert (home.stat().st_mode & 0o777) == 0o700 and ((home / "supervisor.token").stat().st_mode & 0o777) == 0o600
    code = ("import sys, urllib.request, urllib.error\n"
            "try:\n    open(sys.argv[2]).read(); print('token readable')\n"
            "except OSError as e:\n    print('token', type(e).__name__)\n"
            "r = urllib.request.Request(sys.argv[1] + '/storage/v1/b/ckpt/o/x', method='DELETE')\n"
            "try:\n    urllib.request.urlopen(r, timeout=10); print('answered')\n"
            "except urllib.error.HTTPError as e:\n    print('http', e.code)\n")
    python = shutil.which("python3", path="/usr/bin:/bin")  # the venv's interpreter may be in root's home
    if os.getuid() != 0 or python is None:
        pytest.skip("needs root (to run a process as uid 65534) and a system python3")
    done = subprocess.run([python, "-I", "-c", code, endpoint, str(home / "supervisor.token")], user=65534,
                          group=65534, capture_output=True, text=True, timeout=60, cwd="/")
    assert done.stdout.split("\n")[:2] == ["token PermissionError", "http 401"], done.stderr


def test_local_gcs_auth_google_cloud_storage_needs_the_token_and_the_provider_sends_it(home):
    endpoint = local_gcs.endpoint(home)
    anonymous = storage.Client(project="p", credentials=AnonymousCredentials(), client_options={"api_endpoint": endpoint})
    # On a 401 google-auth's AuthorizedSession tries to refresh the credentials (its refresh_status_codes), which
    # anonymous credentials cannot: google/auth/transport/requests.py AuthorizedSession.request@v2.63.0
    # (DEFAULT_REFRESH_STATUS_CODES is 401).
    with pytest.raises(InvalidOperation, match="Anonymous credentials cannot be refreshed"):
        list(anonymous.list_blobs("ckpt", retry=None))
    with pytest.raises(RefreshError):  # a wrong token, as Credentials(token) without a refresh token
        list(storage.Client(project="p", credentials=Credentials(token="0" * 64),
                            client_options={"api_endpoint": endpoint}).list_blobs("ckpt", retry=None))
    with_token = storage.Client(project="p", credentials=Credentials(token=token_of(home)),
                                client_options={"api_endpoint": endpoint})
    assert [b.name for b in with_token.list_blobs("ckpt")] == [COMMIT]
    assert [b.name for b in local_gcs_hook(str(home)).get_conn().list_blobs("ckpt")] == [COMMIT]  # GCSHook


def test_local_gcs_auth_token_is_the_local_clusters(tmp_path):
    """One token per home for both servers: the local GCS makes it when the cluster has not, and reuses it."""
    with LocalGcs(tmp_path) as first:
        pass
    assert first.token == read_token(tmp_path) and LocalGcs(tmp_path).token == first.token


def test_local_gcs_auth_health_proves_the_token_and_an_impostor_is_never_sent_it(home, tmp_path_factory):
    """Without credentials the health path answers only HMAC(token, nonce). A server holding another token at the
    recorded port (another program took it) does not count as the home's server, and receives no token."""
    endpoint = local_gcs.endpoint(home)
    status, body = call(endpoint, "GET", "/_mtc/health?nonce=" + "ab" * 16)
    assert status == 200 and set(body) == {"proof"} and token_of(home) not in json.dumps(body)
    assert call(endpoint, "GET", "/_mtc/health")[0] == 400  # no nonce
    other = tmp_path_factory.mktemp("other")
    with LocalGcs(other, token=b"f" * 64) as impostor:
        info = json.loads((home / "gcs" / "server.json").read_text())
        (home / "gcs" / "server.json").write_text(json.dumps({**info, "endpoint": impostor.endpoint}))
        assert not lifecycle._answers(impostor.endpoint, home) and lifecycle.endpoint(home) is None
        # Only the unauthenticated health question reached it (a call with a token would be another path, or 401).
        assert [(s.path, s.status) for s in impostor.served] == [("/_mtc/health", 200)] * len(impostor.served)
        assert impostor.served
        (home / "gcs" / "server.json").write_text(json.dumps(info))


# ---- local_gcs_prefix_escape -------------------------------------------------------------------------------------
@pytest.mark.parametrize("prefix", ["../../", "../", "run/../../../", "/etc/", "./", "run//", "run/\x00/"])
def test_local_gcs_prefix_escape_is_400_and_lists_nothing_outside(home, prefix):
    """`prefix=../../` listed the home's token and kubeconfig names; every prefix now stays in the bucket folder."""
    status, body = call(local_gcs.endpoint(home), "GET",
                        "/storage/v1/b/ckpt/o?" + urllib.parse.urlencode({"prefix": prefix}), token=token_of(home))
    assert status == 400, body
    assert "prefix" in body["error"]["message"] and repr(prefix) in body["error"]["message"]
    assert "supervisor.token" not in json.dumps(body)


def test_local_gcs_prefix_escape_through_the_real_client_and_object_names(home):
    client = local_gcs_hook(str(home)).get_conn()
    with pytest.raises(exceptions.BadRequest, match="Invalid prefix"):
        list(client.list_blobs("ckpt", prefix="../../", retry=None))
    token = token_of(home)
    endpoint = local_gcs.endpoint(home)
    for name in ("../../supervisor.token", "run/../../../kubeconfig", "/etc/passwd", "a\x00b"):
        status, body = call(endpoint, "GET", f"/storage/v1/b/ckpt/o/{urllib.parse.quote(name, safe='')}?alt=media",
                            token=token)
        assert status == 400 and "not usable" in body["error"]["message"], (name, body)
    for bucket in ("..", "..%2F..", "..%2F..%2Fgcs", "%00", "Ckpt"):
        status, body = call(endpoint, "GET", f"/storage/v1/b/{bucket}/o", token=token)
        assert status == 400 and "Invalid bucket name" in body["error"]["message"], (bucket, body)
    assert [b.name for b in client.list_blobs("ckpt", prefix="run/")] == [COMMIT]  # a good prefix still lists


def test_local_gcs_prefix_escape_through_a_symbolic_link_is_refused(home):
    """A link in the bucket folder leading out of it (to the home) is neither listed nor served."""
    folder = home / "buckets" / "ckpt"
    (folder / "out").symlink_to(home, target_is_directory=True)
    (folder / "token-link").symlink_to(home / "supervisor.token")
    client = local_gcs_hook(str(home)).get_conn()
    assert sorted(b.name for b in client.list_blobs("ckpt")) == [COMMIT]
    with pytest.raises(exceptions.BadRequest, match="outside its bucket folder"):
        list(client.list_blobs("ckpt", prefix="out/", retry=None))
    with pytest.raises(exceptions.BadRequest, match="outside its bucket folder"):
        client.bucket("ckpt").blob("token-link").download_as_bytes()
    with pytest.raises(exceptions.BadRequest, match="outside its bucket folder"):
        client.bucket("ckpt").blob("out/kubeconfig").upload_from_string(b"x")
    assert os.path.islink(folder / "out") and not (home / "kubeconfig").exists()


# ---- tensorstore (Orbax's array storage) ------------------------------------------------------------------------
TENSORSTORE_PROBE = """
import tensorstore as ts
kv = ts.KvStore.open({"driver": "gcs", "bucket": "ckpt"}).result()
try:
    kv.write("ts/x", b"hello").result()
    print("wrote", kv.read("ts/x").result().value.decode())
except ValueError as err:
    print("refused", "401" in str(err))
"""


@pytest.mark.parametrize("token_kind, expected", [("home", "wrote hello"), ("none", "refused True"),
                                                  ("wrong", "refused True")])
def test_local_gcs_auth_tensorstore_sends_a_bearer_token_when_given_one(home, token_kind, expected):
    """tensorstore's gcs driver, pointed at the local GCS with TENSORSTORE_GCS_HTTP_URL, sends the fixed bearer
    token of GOOGLE_AUTH_TOKEN_FOR_TESTING (its first credential source: tensorstore/internal/oauth2/
    google_auth_provider.cc, GetDefaultGoogleAuthProvider); with none it calls anonymously and is refused. (The
    local workload itself writes the bucket folder as files, as through GCS FUSE, and never calls the local GCS.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "TENSORSTORE_"))}
    env.update({"TENSORSTORE_GCS_HTTP_URL": local_gcs.endpoint(home), "CLOUDSDK_CONFIG": str(home / "no-gcloud"),
                "GCE_METADATA_ROOT": "127.0.0.1:9"})  # no ADC, no metadata server: only what is given here
    if token_kind != "none":
        env["GOOGLE_AUTH_TOKEN_FOR_TESTING"] = token_of(home) if token_kind == "home" else "0" * 64
    done = subprocess.run([sys.executable, "-c", TENSORSTORE_PROBE], env=env, capture_output=True, text=True,
                          timeout=90)
    assert done.stdout.strip().splitlines()[-1:] == [expected], done.stderr[-2000:]
    assert (home / "buckets" / "ckpt" / "ts" / "x").exists() == (token_kind == "home")
