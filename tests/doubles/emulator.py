"""An in-process gcp-storage-emulator on 127.0.0.1 that counts the requests it serves.

Reusable by benchmarks: `with CountingEmulator() as gcs: ...; gcs.reset(); <poke>; gcs.count("GET", "/o")`.
The emulator answers every listing in one response (no paging, no startOffset), so `gcs_pages` also gives
what real GCS would need: one page per 1,000 returned entries.
"""

from __future__ import annotations

import math
import os
import socket
import threading
from dataclasses import dataclass, field


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Served:
    method: str
    path: str
    entries: int = 0


@dataclass
class CountingEmulator:
    port: int = field(default_factory=free_port)
    requests: list[Served] = field(default_factory=list)
    # Listings fail until this time.monotonic() with this status (or hang `hang_s` when status is "timeout").
    outage_until: float = 0.0
    outage_status: int | str = 503
    hang_s: float = 2.0

    def fail_listings(self, status: int | str, seconds: float) -> None:
        """GCS listings answer `status` (403/429/503) or hang ("timeout") for `seconds`; training goes on."""
        import time

        self.outage_status, self.outage_until = status, time.monotonic() + seconds

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.url, "TENSORSTORE_GCS_HTTP_URL": self.url}

    def __enter__(self) -> "CountingEmulator":
        from gcp_storage_emulator import server

        self._lock = threading.Lock()
        counter = self
        original_json, original_handle = server.Response.json, server.Router.handle

        def json(response, obj):
            # A listing answer: remember how many entries it returned (real GCS pages them by 1,000).
            if isinstance(obj, dict) and obj.get("kind") == "storage#objects":
                with counter._lock:
                    counter.requests[-1].entries = len(obj.get("items") or []) + len(obj.get("prefixes") or [])
            return original_json(response, obj)

        def handle(router, method):
            import json as _json
            import time

            path = router._request_handler.path.split("?")[0]
            with counter._lock:
                counter.requests.append(Served(method, path))
            if method == "GET" and path.rstrip("/").endswith("/o") and time.monotonic() < counter.outage_until:
                if counter.outage_status == "timeout":
                    time.sleep(counter.hang_s)
                else:
                    # The local GCS's outage answers: GCS's error bodies for 403, 429 and 503
                    # (cloud.google.com/storage/docs/json_api/v1/status-codes).
                    from mtc_local.gcs.errors import outage

                    error = outage(int(counter.outage_status))
                    response = server.Response(router._request_handler)
                    response.status = __import__("http").HTTPStatus(error.code)
                    response.json(error.body())
                    return response.close()
            return original_handle(router, method)

        self._patches = [(server.Response, "json", original_json), (server.Router, "handle", original_handle)]
        server.Response.json, server.Router.handle = json, handle
        self._server = server.create_server("127.0.0.1", self.port, in_memory=True)
        self._server.start()
        self._old_env = {k: os.environ.get(k) for k in self.env()}
        os.environ.update(self.env())
        return self

    def __exit__(self, *exc) -> None:
        self._server.stop()
        for owner, name, original in self._patches:
            setattr(owner, name, original)
        for key, value in self._old_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()

    def count(self, method: str | None = None, contains: str | None = None) -> int:
        return sum(1 for r in self.requests if (method is None or r.method == method)
                   and (contains is None or contains in r.path))

    def listings(self) -> list[Served]:
        return [r for r in self.requests if r.method == "GET" and r.path.rstrip("/").endswith("/o")]

    def gcs_pages(self) -> int:
        """Pages real GCS would serve for the listings seen (1,000 entries a page, at least one per listing)."""
        return sum(max(1, math.ceil(r.entries / 1000)) for r in self.listings())

    def seed(self, bucket: str, names: list[str], content: bytes = b"x") -> None:
        """Create many objects at once, server-side (uploading 100,000 objects over HTTP would take hours:
        the emulator rewrites its whole index on every upload). Each copies the resource of a real upload."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage as gcs_storage

        storage = self._server._storage
        if not storage.objects.get(bucket):
            client = gcs_storage.Client(project="mtc-test", credentials=AnonymousCredentials())
            client.bucket(bucket).blob(".mtc-seed-template").upload_from_string(content)
        template = next(iter(storage.objects[bucket].values()))
        with self._lock:
            for name in names:
                storage._store.write_bytes(storage._object_path(bucket, name), content)
                storage.objects[bucket][name] = {**template, "name": name, "id": f"{bucket}/{name}/{template.get('generation', '1')}",
                                                 "selfLink": f"{self.url}/storage/v1/b/{bucket}/o/{name}"}
            storage._write_config_to_file()
