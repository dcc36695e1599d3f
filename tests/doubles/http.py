"""The one HTTP double base: a threaded HTTP(S) server on 127.0.0.1 that the real client libraries talk to.

A double subclasses `HttpDouble` and answers in `route(method, path, query, body)` (raise `HttpError` for an error
answer, return `(status, JSON body)`, or a `Raw`/`Stream` answer for text and streamed bodies); `error_body` gives
the API's own error shape. What every double shares lives here:

- every request as sent, in `requests` (`Request`: method, path, query, JSON body, bearer token, headers);
- faults queued per (method, path fragment), `fail(...)`: the next matching request gets that status;
- `errors_next`: the next requests, whatever they are, get these statuses (a 429 carries `Retry-After: 0`, as
  RFC 6585 section 4 lets a server say when to retry);
- bearer tokens: a token in `expired_tokens` gets a 401 (as an expired OAuth token does), and with `require_token`
  a request without one does too.

Bodies are JSON unless the route says otherwise; a request body that is not JSON (a form-encoded token request) is
kept as text.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator
from urllib.parse import parse_qs, urlsplit


class HttpError(Exception):
    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.reason = status, message, reason


@dataclass
class Request:
    method: str
    path: str
    query_lists: dict[str, list[str]]  # as parse_qs gives it, blank values kept
    body: Any
    token: str
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased (HTTP names are case-insensitive)

    @property
    def query(self) -> dict[str, str]:
        """Each query parameter's last value."""
        return {key: values[-1] for key, values in self.query_lists.items()}

    @property
    def auth(self) -> str:
        return self.headers.get("authorization", "")


@dataclass
class Fault:
    method: str
    fragment: str
    status: int
    times: int = 1
    message: str = "injected fault"


@dataclass
class Raw:
    """A non-JSON answer (a pod's log as text/plain)."""
    status: int
    data: bytes
    content_type: str = "text/plain"


@dataclass
class Stream:
    """A chunked answer written line by line while the route's generator yields (a Kubernetes watch)."""
    lines: Iterator[dict[str, Any]]
    status: int = 200


class HttpDouble:
    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.lock = threading.RLock()
        self.faults: list[Fault] = []
        self.errors_next: list[int] = []
        self.requests: list[Request] = []
        self.expired_tokens: set[str] = set()
        self.require_token = False
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                double._handle(self, "GET")

            def do_POST(self) -> None:
                double._handle(self, "POST")

            def do_PUT(self) -> None:
                double._handle(self, "PUT")

            def do_PATCH(self) -> None:
                double._handle(self, "PATCH")

            def do_DELETE(self) -> None:
                double._handle(self, "DELETE")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if ssl_context is not None:
            self.httpd.socket = ssl_context.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https" if ssl_context else "http"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    # --- life ---------------------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self):
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # --- what tests script and read -----------------------------------------------------------------------
    def fail(self, method: str, fragment: str, status: int, times: int = 1, message: str = "injected fault") -> None:
        with self.lock:
            self.faults.append(Fault(method, fragment, status, times, message))

    def count(self, method: str, fragment: str = "") -> int:
        return sum(1 for r in self.requests if r.method == method and fragment in r.path)

    # --- for subclasses -----------------------------------------------------------------------------------
    def error_body(self, status: int, message: str, reason: str = "") -> dict[str, Any]:
        return {"error": {"code": status, "message": message, "reason": reason}}

    def answer(self, method: str, path: str, query: dict[str, list[str]], body: Any, token: str) -> Any:
        """Before the route: a subclass answers its own plumbing here (a token endpoint) or returns None."""
        return None

    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Any:
        raise HttpError(404, f"no route for {method} {path}")

    # --- plumbing -----------------------------------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        auth = handler.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else ""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        query = parse_qs(parts.query, keep_blank_values=True)
        with self.lock:
            self.requests.append(Request(method, parts.path, query, body, token, {k.lower(): v for k, v in handler.headers.items()}))
            answer = self._dispatch(method, parts.path, query, body, token)
        if isinstance(answer, Stream):
            return self._stream(handler, answer)
        if isinstance(answer, Raw):
            return self._send(handler, answer.status, answer.data, answer.content_type)
        status, payload = answer
        self._send(handler, status, json.dumps(payload).encode(), "application/json")

    def _dispatch(self, method: str, path: str, query: dict[str, list[str]], body: Any, token: str) -> Any:
        answered = self.answer(method, path, query, body, token)
        if answered is not None:
            return answered
        if token in self.expired_tokens or (self.require_token and not token):
            return 401, self.error_body(401, "Request had invalid authentication credentials: token expired")
        if self.errors_next:
            status = self.errors_next.pop(0)
            return status, self.error_body(status, "scripted")
        for fault in self.faults:
            if fault.method == method and fault.fragment in path and fault.times > 0:
                fault.times -= 1
                return fault.status, self.error_body(fault.status, fault.message)
        try:
            return self.route(method, path, query, body if not isinstance(body, str) else None)
        except HttpError as exc:
            return exc.status, self.error_body(exc.status, exc.message, exc.reason)

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, data: bytes, content_type: str) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        if status == 429:
            handler.send_header("Retry-After", "0")
        handler.end_headers()
        handler.wfile.write(data)

    @staticmethod
    def _stream(handler: BaseHTTPRequestHandler, answer: Stream) -> None:
        handler.send_response(answer.status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        try:
            for line in answer.lines:
                data = (json.dumps(line) + "\n").encode()
                handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                handler.wfile.flush()
        finally:
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()


def match(pattern: str, path: str) -> dict[str, str] | None:
    found = re.fullmatch(pattern, path)
    return found.groupdict() if found else None

