"""A small threaded HTTP(S) server base for the fake APIs: JSON routes, fault injection, bearer-token checks.

Each fake speaks the real API's JSON shapes on 127.0.0.1 so the real client libraries talk to it.
Faults are queued per (method, path fragment): the next matching request gets that status instead.
`/v1/projects/-/serviceAccounts/SA:generateAccessToken` impersonates SA.
A token in `expired_tokens` gets a 401, as an expired OAuth token would. `/token` issues OAuth tokens
(a service-account keyfile's token_uri can point here).
"""

from __future__ import annotations

import json
import re
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                 409: "ABORTED", 412: "FAILED_PRECONDITION", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}


class HttpError(Exception):
    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.reason = status, message, reason


@dataclass
class Fault:
    method: str
    fragment: str
    status: int
    times: int = 1
    message: str = "injected fault"


class FakeServer:
    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.lock = threading.RLock()
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str, str]] = []  # (method, path, token)
        # Every request as sent: (method, path, query, JSON body or None); tests/operators/gcp/test_conformance.py reads it.
        self.exchanges: list[tuple[str, str, dict[str, list[str]], Any]] = []
        self.expired_tokens: set[str] = set()
        self.require_token = False
        self.issued = 0
        self.impersonated: list[tuple[str, str]] = []  # (service account, the caller's token)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self, method: str) -> None:
                server._handle(self, method)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def do_PUT(self) -> None:
                self._serve("PUT")

            def do_PATCH(self) -> None:
                self._serve("PATCH")

            def do_DELETE(self) -> None:
                self._serve("DELETE")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if ssl_context is not None:
            self.httpd.socket = ssl_context.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https" if ssl_context else "http"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self) -> "FakeServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def fail(self, method: str, fragment: str, status: int, times: int = 1, message: str = "injected fault") -> None:
        with self.lock:
            self.faults.append(Fault(method, fragment, status, times, message))

    def count(self, method: str, fragment: str = "") -> int:
        return sum(1 for m, p, _ in self.requests if m == method and fragment in p)

    # --- plumbing -------------------------------------------------------------------------------

    def error_body(self, status: int, message: str, reason: str = "") -> dict[str, Any]:
        return {"error": {"code": status, "message": message, "status": reason or GOOGLE_STATUS.get(status, "UNKNOWN"),
                          "errors": [{"message": message, "reason": reason or "error"}]}}

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        auth = handler.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else ""
        with self.lock:
            self.requests.append((method, parts.path, token))
            try:
                sent = json.loads(raw) if raw else None
            except ValueError:  # not JSON (a form-encoded token request): kept as text
                sent = raw.decode(errors="replace")
            self.exchanges.append((method, parts.path, parse_qs(parts.query, keep_blank_values=True), sent))
            status, body = self._dispatch(method, parts.path, parse_qs(parts.query), raw, token)
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _dispatch(self, method: str, path: str, query: dict[str, list[str]], raw: bytes, token: str) -> tuple[int, Any]:
        if path == "/token" and method == "POST":
            self.issued += 1
            return 200, {"access_token": f"token-{self.issued}", "expires_in": 3600, "token_type": "Bearer"}
        if (m := match(r"/v1/projects/-/serviceAccounts/(?P<sa>[^/:]+):generateAccessToken", path)) and method == "POST":
            # IAM Credentials generateAccessToken: the caller's token buys a token for the service account
            # (https://cloud.google.com/iam/docs/reference/credentials/rest/v1/projects.serviceAccounts/generateAccessToken).
            self.impersonated.append((m["sa"], token))
            return 200, {"accessToken": f"impersonated-{m['sa']}", "expireTime": "2099-01-01T00:00:00Z"}
        if token in self.expired_tokens or (self.require_token and not token):
            return 401, self.error_body(401, "Request had invalid authentication credentials: token expired")
        for fault in self.faults:
            if fault.method == method and fault.fragment in path and fault.times > 0:
                fault.times -= 1
                return fault.status, self.error_body(fault.status, fault.message)
        try:
            body = json.loads(raw) if raw else None
            return self.route(method, path, query, body)
        except HttpError as exc:
            return exc.status, self.error_body(exc.status, exc.message, exc.reason)

    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        raise HttpError(404, f"no route for {method} {path}")


def match(pattern: str, path: str) -> dict[str, str] | None:
    found = re.fullmatch(pattern, path)
    return found.groupdict() if found else None
