"""A GCS JSON API server over the local target's bucket folders (`<home>/buckets/<bucket>/`: the files are the
objects). The provider reaches it with google-cloud-storage and GCSHook exactly as it reaches GCS.

What it serves (https://cloud.google.com/storage/docs/json_api/v1):
- buckets: insert, get, list (`/storage/v1/b`); getIamPolicy / setIamPolicy (`/storage/v1/b/<b>/iam`);
- objects: list (listing.py), get (metadata, or `alt=media`, also as `/download/storage/v1/...`, with `Range`),
  delete, and the uploads google-cloud-storage sends (https://cloud.google.com/storage/docs/uploads-downloads):
  `uploadType=media`, `multipart` (multipart/related: JSON metadata, then the data) and `resumable`
  (https://cloud.google.com/storage/docs/performing-resumable-uploads: a session URI in `Location`, chunks with
  `Content-Range`, 308 with `Range` until the last one);
- errors with GCS's body (errors.py); listing outages from a control file (faults.py).

Who may use it: a client with the home's bearer token (`Authorization: Bearer <token>`, the same
`<home>/supervisor.token` the local API server takes: mtc_local.token); anything else is 401
with GCS's body. Only `/_mtc/health?nonce=N` answers without it, and only with HMAC(token, nonce), so a client
checks that a port really is its home's server before it sends the token there. Every bucket and object name and
every listing prefix stays inside the bucket folder (buckets.py): anything else is 400.

Run as a process: `python -m mtc_local.gcs.server --home DIR [--port 0]`; it binds MTC_GCS_BIND_HOST
(default 127.0.0.1; 0.0.0.0 in docker-compose, where other containers reach it) and writes
`<home>/gcs/server.json` (pid, port, endpoint) once it listens. lifecycle.py starts and stops it.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import re
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import parse_qs, unquote, urlsplit

from mtc_local.token import health_proof
from mtc_local.gcs import errors
from mtc_local.gcs.buckets import FolderBuckets, check_prefix
from mtc_local.gcs.errors import GcsError
from mtc_local.gcs.faults import ListingFaults
from mtc_local.gcs.listing import BadListing, list_page
from mtc_local.shared import auth

BIND_HOST_ENV = "MTC_GCS_BIND_HOST"
ADVERTISE_HOST_ENV = "MTC_GCS_ADVERTISE_HOST"
DEFAULT_BIND_HOST = "127.0.0.1"
CHUNK = 1 << 20
RANGE_RE = re.compile(r"bytes=(\d*)-(\d*)$")
CONTENT_RANGE_RE = re.compile(r"bytes (?:(\d+)-(\d+)|\*)/(\d+|\*)$")


def bind_host() -> str:
    return os.environ.get(BIND_HOST_ENV) or DEFAULT_BIND_HOST


def advertised_host(bound: str) -> str:
    """The address clients use: MTC_GCS_ADVERTISE_HOST, else the bound one (the host name when bound to all)."""
    if os.environ.get(ADVERTISE_HOST_ENV):
        return os.environ[ADVERTISE_HOST_ENV]
    return socket.gethostname() if bound == "0.0.0.0" else bound


@dataclass
class Served:
    """One answered request (for benchmarks that count what sensing costs)."""

    method: str
    path: str
    params: dict[str, str]
    status: int
    entries: int = 0


@dataclass
class UploadSession:
    bucket: str
    name: str
    path: Path
    received: int = 0
    if_generation_match: str | None = None


@dataclass
class LocalGcs:
    """The API over one home's buckets. Use it in-process (`with LocalGcs(home) as gcs: gcs.endpoint`) or run
    `serve()` in the server process."""

    home: str | Path
    host: str = field(default_factory=bind_host)
    port: int = 0
    served: list[Served] = field(default_factory=list)
    token: bytes | None = None  # default: the home's token (made when the home has none yet)

    def __post_init__(self) -> None:
        root = Path(self.home).resolve()
        auth.make_private_dir(root)
        if self.token is None:
            self.token = auth.ensure_token(root)
        self.buckets = FolderBuckets(self.home)
        self.faults = ListingFaults(self.home)
        self.sessions: dict[str, UploadSession] = {}
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self.last_request = time.monotonic()

    @property
    def endpoint(self) -> str:
        assert self._httpd is not None, "not started"
        return f"http://{advertised_host(self.host)}:{self._httpd.server_address[1]}"

    def start(self) -> "LocalGcs":
        self._httpd = ThreadingHTTPServer((self.host, self.port), _handler(self))
        self._httpd.daemon_threads = True
        return self

    def __enter__(self) -> "LocalGcs":
        self.start()
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="local-gcs", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
        self._thread.join()

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def reset(self) -> None:
        with self._lock:
            self.served.clear()

    def listings(self) -> list[Served]:
        return [s for s in self.served if s.method == "GET" and s.path.endswith("/o")]

    def record(self, served: Served) -> None:
        self.last_request = time.monotonic()
        with self._lock:
            self.served.append(served)

    # ---- who may call --------------------------------------------------------------------------------------
    def authorize(self, header: str | None) -> None:
        """GcsError 401 unless the header carries this home's token (GCS's 401 bodies:
        https://cloud.google.com/storage/docs/json_api/v1/status-codes#401-unauthorized)."""
        scheme, _, given = (header or "").partition(" ")
        if not header:
            raise errors.unauthenticated()
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token):
            raise errors.invalid_credentials()

    def health(self, params: dict[str, str]) -> dict[str, Any]:
        """The unauthenticated answer: proof that this server holds the home's token, nothing else."""
        nonce = params.get("nonce") or ""
        if not 16 <= len(nonce) <= 128:
            raise errors.invalid(f"nonce: {len(nonce)} characters; allowed: 16 to 128")
        return {"proof": health_proof(self.token, nonce)}

    # ---- routes --------------------------------------------------------------------------------------------
    def route(self, method: str, parts: list[str], params: dict[str, str], request: "_Request") -> tuple[int, Any]:
        """(status, JSON body or a (headers, chunks) download) for one request; raises GcsError."""
        if parts[:1] == ["upload"]:
            return self._upload(method, parts[1:], params, request)
        if parts[:1] == ["download"]:
            parts, params = parts[1:], {**params, "alt": "media"}
        if parts[:2] == ["_mtc", "health"]:
            return 200, {"home": str(Path(self.home).resolve()), "pid": os.getpid()}
        if parts[:2] != ["storage", "v1"] or len(parts) < 3 or parts[2] != "b":
            raise GcsError(404, "notFound", f"Not Found: {'/'.join(parts)}")
        rest = parts[3:]
        if not rest:
            if method == "POST":
                return 200, self.buckets.insert(params.get("project", ""), request.json())
            if method == "GET":
                return 200, {"kind": "storage#buckets", "items": [self.buckets.get(n) for n in self.buckets.names()]}
        elif len(rest) == 1 and method == "GET":
            return 200, self.buckets.get(rest[0])
        elif len(rest) == 2 and rest[1] == "iam":
            if method == "GET":
                return 200, self.buckets.get_policy(rest[0], int(params.get("optionsRequestedPolicyVersion") or 1))
            if method == "PUT":
                return 200, self.buckets.set_policy(rest[0], request.json())
        elif len(rest) == 2 and rest[1] == "o" and method == "GET":
            return 200, self._list(rest[0], params)
        elif len(rest) == 3 and rest[1] == "o":
            if method == "GET" and params.get("alt") == "media":
                return self._download(rest[0], rest[2], request.headers.get("Range"))
            if method == "GET":
                return 200, self.buckets.object_resource(rest[0], rest[2], hashes=True)
            if method == "DELETE":
                self.buckets.delete(rest[0], rest[2])
                return 204, None
        raise GcsError(405, "methodNotAllowed", f"{method} is not served for {'/'.join(parts)}")

    def _list(self, bucket: str, params: dict[str, str]) -> dict[str, Any]:
        prefix = check_prefix(params.get("prefix") or "")  # a bad prefix is 400 before any outage answer
        rule = self.faults.active(prefix)
        if rule is not None:
            if rule.get("status") == "timeout":
                time.sleep(float(rule.get("hang_s", 2.0)))
            else:
                raise errors.outage(int(rule["status"]))
        names = self.buckets.names_under(bucket, prefix, params.get("matchGlob"))
        try:
            page = list_page(names, params)
        except BadListing as exc:
            raise errors.invalid(str(exc)) from None
        items = [r for r in (self.buckets.listed_resource(bucket, n) for n in page.items) if r is not None]
        body: dict[str, Any] = {"kind": "storage#objects"}
        if items:
            body["items"] = items
        if page.prefixes:
            body["prefixes"] = page.prefixes
        if page.next_page_token:
            body["nextPageToken"] = page.next_page_token
        return body

    def _download(self, bucket: str, name: str, range_header: str | None) -> tuple[int, Any]:
        resource = self.buckets.object_resource(bucket, name, hashes=True)
        path = self.buckets.object_path(bucket, name)
        size = int(resource["size"])
        start, end, status = 0, size - 1, 200
        if range_header:
            match = RANGE_RE.match(range_header.strip())
            if not match or (not match.group(1) and not match.group(2)):
                raise GcsError(416, "requestedRangeNotSatisfiable", f"Invalid Range: {range_header}")
            if match.group(1):
                start = int(match.group(1))
                end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            else:  # bytes=-N: the last N bytes
                start = max(0, size - int(match.group(2)))
            if start >= size and size > 0:
                raise GcsError(416, "requestedRangeNotSatisfiable", "The requested range cannot be satisfied.")
            status = 206
        md5, crc = resource["md5Hash"], resource["crc32c"]
        headers = {"Content-Type": resource["contentType"], "X-Goog-Generation": resource["generation"],
                   "X-Goog-Metageneration": "1", "X-Goog-Stored-Content-Length": str(size),
                   "X-Goog-Hash": f"crc32c={crc},md5={md5}", "ETag": resource["etag"]}
        length = max(0, end - start + 1)
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        return status, (headers, length, _read(path, start, length))

    # ---- uploads -------------------------------------------------------------------------------------------
    def _upload(self, method: str, parts: list[str], params: dict[str, str], request: "_Request") -> tuple[int, Any]:
        if parts[:3] != ["storage", "v1", "b"] or len(parts) != 5 or parts[4] != "o":
            raise GcsError(404, "notFound", f"Not Found: upload/{'/'.join(parts)}")
        bucket, kind = parts[3], params.get("uploadType", "")
        precondition = params.get("ifGenerationMatch")
        if kind == "media":
            name = params.get("name") or ""
            return 200, self.buckets.write(bucket, name, request.body_chunks(), precondition)
        if kind == "multipart":
            metadata, data = _multipart(request.headers.get("Content-Type", ""), request.body())
            name = params.get("name") or metadata.get("name") or ""
            return 200, self.buckets.write(bucket, name, iter([data]), precondition)
        if kind == "resumable" and method == "POST":
            metadata = request.json() if request.length else {}
            name = params.get("name") or metadata.get("name") or ""
            self.buckets.get(bucket)
            self.buckets.object_path(bucket, name)  # a bad name fails before the session exists
            upload_id = uuid.uuid4().hex
            self.buckets.tmp_dir.mkdir(parents=True, exist_ok=True)
            session = UploadSession(bucket, name, self.buckets.tmp_dir / f"upload-{upload_id}", 0, precondition)
            session.path.write_bytes(b"")
            with self._lock:
                self.sessions[upload_id] = session
            host = request.headers.get("Host") or f"{advertised_host(self.host)}:{self._httpd.server_address[1]}"
            location = f"http://{host}/upload/storage/v1/b/{bucket}/o?uploadType=resumable&upload_id={upload_id}"
            return 200, ({"Location": location}, 0, iter(()))
        if kind == "resumable" and method == "PUT":
            return self._resume(params.get("upload_id", ""), request)
        raise errors.invalid(f"Unsupported uploadType {kind!r} for {method} (media, multipart or resumable)")

    def _resume(self, upload_id: str, request: "_Request") -> tuple[int, Any]:
        with self._lock:
            session = self.sessions.get(upload_id)
        if session is None:
            raise GcsError(404, "notFound", f"No such upload session: {upload_id}")
        header = (request.headers.get("Content-Range") or "").strip()
        match = CONTENT_RANGE_RE.match(header) if header else None
        if header and not match:
            raise errors.invalid(f"Invalid Content-Range: {header}")
        data = request.body()
        if data:
            first = int(match.group(1)) if match and match.group(1) else session.received
            if first != session.received:
                raise errors.invalid(f"Content-Range starts at {first}; {session.received} bytes were received")
            with open(session.path, "ab") as out:
                out.write(data)
            session.received += len(data)
        total = match.group(3) if match else str(session.received)
        if total != "*" and int(total) == session.received:
            with self._lock:
                self.sessions.pop(upload_id, None)
            try:
                with open(session.path, "rb") as src:
                    return 200, self.buckets.write(session.bucket, session.name, iter(lambda: src.read(CHUNK), b""),
                                                   session.if_generation_match)
            finally:
                session.path.unlink(missing_ok=True)
        headers = {"Range": f"bytes=0-{session.received - 1}"} if session.received else {}
        return 308, (headers, 0, iter(()))


def _read(path: Path, start: int, length: int) -> Iterator[bytes]:
    with open(path, "rb") as src:
        src.seek(start)
        while length > 0:
            chunk = src.read(min(CHUNK, length))
            if not chunk:
                return
            length -= len(chunk)
            yield chunk


def _multipart(content_type: str, body: bytes) -> tuple[dict[str, Any], bytes]:
    """(metadata, data) of a multipart/related upload body: a JSON part, then the media part."""
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if not content_type.startswith("multipart/related") or not match:
        raise errors.invalid("A multipart upload needs Content-Type multipart/related with a boundary")
    delimiter = b"--" + match.group(1).encode()
    parts = [p for p in body.split(delimiter)[1:] if not p.startswith(b"--")]
    if len(parts) != 2:
        raise errors.invalid(f"A multipart upload has 2 parts (metadata, media); got {len(parts)}")
    out = []
    for part in parts:
        head, sep, content = part.partition(b"\r\n\r\n")
        if not sep:
            raise errors.invalid("A multipart part has no header/body separator")
        out.append(content[:-2] if content.endswith(b"\r\n") else content)
    try:
        metadata = json.loads(out[0] or b"{}")
    except ValueError:
        raise errors.invalid("The multipart upload's first part is not JSON metadata") from None
    return metadata, out[1]


class _Request:
    def __init__(self, handler: BaseHTTPRequestHandler) -> None:
        self.headers = handler.headers
        self.length = int(handler.headers.get("Content-Length") or 0)
        self._rfile = handler.rfile
        self._read = False

    def body(self) -> bytes:
        self._read = True
        return self._rfile.read(self.length) if self.length else b""

    def body_chunks(self) -> Iterator[bytes]:
        self._read, left = True, self.length
        while left > 0:
            chunk = self._rfile.read(min(CHUNK, left))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk

    def json(self) -> dict[str, Any]:
        try:
            data = json.loads(self.body() or b"{}")
        except ValueError:
            raise errors.invalid("The request body is not JSON") from None
        if not isinstance(data, dict):
            raise errors.invalid("The request body is not a JSON object")
        return data

    def drain(self) -> None:
        if not self._read and self.length:
            self.body()


def _handler(gcs: LocalGcs) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the client's session expects
        # TCP_NODELAY, as Google's front ends answer: the headers and the body are two writes here, and with Nagle's
        # algorithm the body waits for the client's delayed ACK of the headers (about 40 ms on Linux) per request.
        disable_nagle_algorithm = True

        def log_message(self, *args: Any) -> None:  # quiet: one line per request would drown the log
            pass

        def _serve(self, method: str) -> None:
            url = urlsplit(self.path)
            params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            parts = [unquote(p) for p in url.path.strip("/").split("/")]  # %2F in an object name stays one part
            request = _Request(self)
            entries = 0
            try:
                if parts[:2] == ["_mtc", "health"] and not self.headers.get("Authorization"):
                    status, body = 200, gcs.health(params)
                else:
                    gcs.authorize(self.headers.get("Authorization"))
                    status, body = gcs.route(method, parts, params, request)
                if isinstance(body, dict):
                    entries = len(body.get("items") or []) + len(body.get("prefixes") or [])
            except GcsError as exc:
                status, body = exc.code, exc.body()
            except Exception as exc:  # noqa: BLE001 - a server bug answers 500 with GCS's body, never hangs
                status, body = 500, GcsError(500, "backendError", f"{type(exc).__name__}: {exc}").body()
            request.drain()
            gcs.record(Served(method, url.path, params, status, entries))
            if isinstance(body, tuple):
                headers, length, chunks = body
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(length))
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(chunk)
                return
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            if status == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="mtc-local-gcs"')
            if data:
                self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            self._serve("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._serve("POST")

        def do_PUT(self) -> None:  # noqa: N802
            self._serve("PUT")

        def do_DELETE(self) -> None:  # noqa: N802
            self._serve("DELETE")

    return Handler


def main(argv: list[str] | None = None) -> None:
    from mtc_local.gcs import lifecycle

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--idle-seconds", type=float, default=0.0,
                        help="exit after this long without a request (0: run until stopped)")
    args = parser.parse_args(argv)
    gcs = LocalGcs(args.home, port=args.port).start()
    gcs.served = _Discard()  # a long-lived server keeps no request history
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=gcs.close).start())
    threading.Thread(target=_watch, args=(gcs, args.idle_seconds), daemon=True).start()
    lifecycle.write_server_file(args.home, gcs.endpoint, gcs._httpd.server_address[1])
    print(f"serving {Path(args.home).resolve()}/buckets at {gcs.endpoint}", flush=True)
    gcs._httpd.serve_forever()
    lifecycle.remove_server_file(args.home, os.getpid())


def _watch(gcs: LocalGcs, idle_seconds: float) -> None:
    """Exit when the home is gone (a deleted test home) or, with idle_seconds, after that long unused."""
    home = Path(gcs.home)
    while True:
        time.sleep(1.0)
        idle = time.monotonic() - gcs.last_request
        if not home.is_dir() or (idle_seconds and idle > idle_seconds):
            print(f"exiting: {'home removed' if not home.is_dir() else f'idle for {idle:.0f}s'}", flush=True)
            gcs.close()
            return


class _Discard(list):
    def append(self, item: Any) -> None:
        pass


if __name__ == "__main__":
    main()
