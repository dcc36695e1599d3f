"""A GCS JSON API listing server for the sensing benchmark: `objects.list` as GCS documents it, with paging,
`startOffset` and `matchGlob`, serving names seeded in memory; it counts the requests it answers.

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

import bisect
import json
import re
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

MAX_RESULTS = 1000
CREATED = "2026-11-30T00:00:00.000Z"


@lru_cache(maxsize=256)
def glob_regex(glob: str) -> re.Pattern[str]:
    """GCS matchGlob syntax as a regular expression over the whole object name."""
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = glob.index("]", i + 1)
            body = glob[i + 1:end]
            out.append("[" + ("^" + re.escape(body[1:]) if body.startswith("!") else body.replace("\\", "\\\\")) + "]")
            i = end
        elif c == "{":
            end = glob.index("}", i + 1)
            out.append("(?:" + "|".join(re.escape(a) for a in glob[i + 1:end].split(",")) + ")")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


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
        names = self.names.get(bucket, [])
        prefix = params.get("prefix", "")
        start = max(prefix, params.get("startOffset", ""), params.get("pageToken", ""))
        end = params.get("endOffset")
        glob = glob_regex(params["matchGlob"]) if params.get("matchGlob") else None
        limit = min(int(params.get("maxResults", MAX_RESULTS)), MAX_RESULTS)
        items, index = [], bisect.bisect_left(names, start)
        if params.get("pageToken"):
            index = bisect.bisect_right(names, params["pageToken"])  # the token is the last name served
        next_token = None
        while index < len(names):
            name = names[index]
            if not name.startswith(prefix) or (end is not None and name >= end):
                break
            if glob is None or glob.match(name):
                if len(items) == limit:
                    next_token = items[-1]["name"]
                    break
                items.append({"kind": "storage#object", "name": name, "bucket": bucket, "generation": "1",
                              "size": "1", "timeCreated": CREATED, "updated": CREATED})
            index += 1
        body = {"kind": "storage#objects", "items": items}
        if next_token:
            body["nextPageToken"] = next_token
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
