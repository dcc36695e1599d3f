"""A GCS JSON API listing server for the sensing benchmark: `objects.list` as GCS documents it, with paging,
`startOffset` and `matchGlob` (the local GCS's own listing, mtc_local.gcs.listing), serving names seeded
in memory (100,000 step directories as files would make each listing a walk of 400,000 files); it counts the
requests it answers.

Why not the emulator: gcp-storage-emulator answers every listing in one response and ignores `startOffset`,
so request counts against it are models, not observations. This server implements what the listing calls
need (https://cloud.google.com/storage/docs/json_api/v1/objects/list):

- `prefix`, `startOffset` (inclusive), `endOffset` (exclusive), lexicographic order;
- `matchGlob` (https://cloud.google.com/storage/docs/json_api/v1/objects/list#list-objects-and-prefixes-using-glob):
  `*` any characters except `/`, `**` any characters including `/`, `?` one character except `/`,
  `[abc]` / `[a-z]` one of, `{a,b}` one of the alternatives;
- `maxResults` at most 1,000 (the default), `nextPageToken` / `pageToken` for the following page.

Only GET of `/storage/v1/b/<bucket>/o` (and of the bucket) is served; everything else is a 404.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

from mtc_local.gcs.listing import list_page

CREATED = "2026-11-30T00:00:00.000Z"


@dataclass
class Listing:
    path: str
    params: dict[str, str]
    items: int


@dataclass
class ListingServer:
    names: dict[str, list[str]] = field(default_factory=dict)  # bucket -> sorted object names
    listings: list[Listing] = field(default_factory=list)

    def seed(self, bucket: str, names: list[str]) -> None:
        self.names[bucket] = sorted(set(self.names.get(bucket, [])) | set(names))

    def reset(self) -> None:
        with self._lock:
            self.listings.clear()

    def list_page(self, bucket: str, params: dict[str, str]) -> dict:
        page = list_page(self.names.get(bucket, []), params)
        items = [{"kind": "storage#object", "name": name, "bucket": bucket, "generation": "1", "size": "1",
                  "timeCreated": CREATED, "updated": CREATED} for name in page.items]
        body = {"kind": "storage#objects", "items": items}
        if page.prefixes:
            body["prefixes"] = page.prefixes
        if page.next_page_token:
            body["nextPageToken"] = page.next_page_token
        return body

    # ---- HTTP --------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> "ListingServer":
        server = self
        self._lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802
                url = urlparse(self.path)
                params = {k: v[-1] for k, v in parse_qs(url.query).items()}
                match = re.fullmatch(r"/storage/v1/b/([^/]+)(/o)?/?", url.path)
                if not match:
                    return self._send(404, {"error": {"code": 404, "message": f"not served: {url.path}"}})
                bucket = unquote(match.group(1))
                if not match.group(2):
                    return self._send(200, {"kind": "storage#bucket", "name": bucket, "id": bucket})
                body = server.list_page(bucket, params)
                with server._lock:
                    server.listings.append(Listing(url.path, params, len(body["items"])))
                self._send(200, body)

            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="listing-server", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
