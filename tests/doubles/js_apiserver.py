"""A small fake Kubernetes API server for JobSet custom objects, on 127.0.0.1, driven by real clients.

It speaks /apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets[/{name}] for create/get/list/delete
and the watch stream (newline-delimited JSON events). `script` is consumed by watch streams, one entry
at a time: a status dict (applied, sent as MODIFIED), or a directive: "end-stream" (close the
stream, like a server timeout), "401" / "503" / "429" (the next request gets that error), "410" (the
next watch answers ERROR 410 Gone).

As Kubernetes is documented to behave (kubernetes.io/docs/concepts/architecture/garbage-collection/#foreground-deletion):
a DELETE with propagationPolicy Foreground answers 200 at once and leaves the object readable, with
metadata.deletionTimestamp and the foregroundDeletion finalizer (watchers get MODIFIED), until its pods are gone
(here: `deletion_reads` further GETs of it), then DELETED. It also serves the core/v1 pieces the provider uses:
pods by label selector (`pods`), and ConfigMaps with create-if-absent (409 AlreadyExists) and compare-and-set
replace on metadata.resourceVersion (409 Conflict), as the run lock needs.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

PREFIX = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/"
CORE = "/api/v1/namespaces/"


def _status_body(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason,
            "code": code}


class FakeApiServer:
    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.objects: dict[tuple[str, str], dict] = {}
        self.events: list[tuple[int, str, dict]] = []
        self.rv = 0
        self.script: list = []
        self.pending_errors: list[int] = []  # next requests get these statuses
        self.watch_gone = 0
        self.requests: list[dict] = []
        self.deletion_reads = 1  # GETs a foreground deletion still answers with the object
        self.terminating: dict[tuple[str, str], int] = {}
        self.pods: list[dict] = []
        self.configmaps: dict[tuple[str, str], dict] = {}
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> "FakeApiServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    # --- state ---
    def _bump(self, key, kind: str) -> None:
        self.rv += 1
        obj = self.objects[key]
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, kind, json.loads(json.dumps(obj))))
        self.lock.notify_all()

    def put(self, namespace: str, body: dict) -> dict:
        with self.lock:
            key = (namespace, body["metadata"]["name"])
            obj = json.loads(json.dumps(body))
            obj["metadata"]["namespace"] = namespace
            obj.setdefault("status", {})
            self.objects[key] = obj
            self._bump(key, "ADDED")
            return obj

    def set_status(self, namespace: str, name: str, status: dict) -> None:
        with self.lock:
            self.objects[(namespace, name)]["status"] = status
            self._bump((namespace, name), "MODIFIED")

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if code == 429:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)

            def _route(self, method: str):
                url = urlparse(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null") if length else None
                server.requests.append({"method": method, "path": url.path, "query": query, "body": body,
                                        "auth": self.headers.get("Authorization", "")})
                with server.lock:
                    if server.pending_errors:
                        code = server.pending_errors.pop(0)
                        reasons = {401: "Unauthorized", 429: "TooManyRequests", 503: "ServiceUnavailable"}
                        return self._send(code, _status_body(code, reasons.get(code, "Error"), "scripted"))
                if url.path.startswith(CORE):
                    return self._core(method, url.path[len(CORE):].split("/"), query, body)
                if not url.path.startswith(PREFIX):
                    return self._send(404, _status_body(404, "NotFound", "unknown path"))
                parts = url.path[len(PREFIX):].split("/")
                namespace, name = parts[0], (parts[2] if len(parts) > 2 else None)
                if method == "POST":
                    with server.lock:
                        if (namespace, body["metadata"]["name"]) in server.objects:
                            msg = f'jobsets.jobset.x-k8s.io "{body["metadata"]["name"]}" already exists'
                            return self._send(409, _status_body(409, "AlreadyExists", msg))
                        return self._send(201, server.put(namespace, body))
                if method == "DELETE":
                    key = (namespace, name)
                    policy = (body or {}).get("propagationPolicy") or query.get("propagationPolicy", "Background")
                    with server.lock:
                        if key not in server.objects:
                            return self._send(404, _status_body(404, "NotFound", f'"{name}" not found'))
                        if key in server.terminating:
                            return self._send(200, server.objects[key])
                        if policy == "Foreground" and server.deletion_reads > 0:
                            metadata = server.objects[key]["metadata"]
                            metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                            metadata["finalizers"] = [*metadata.get("finalizers", []), "foregroundDeletion"]
                            server.terminating[key] = server.deletion_reads
                            server._bump(key, "MODIFIED")
                            return self._send(200, server.objects[key])
                        server._bump(key, "DELETED")
                        del server.objects[key]
                    return self._send(200, _status_body(200, "", "deleted") | {"status": "Success"})
                if name:
                    key = (namespace, name)
                    with server.lock:
                        if key in server.terminating:
                            if server.terminating[key] <= 0:  # its pods are gone: the object goes
                                server._bump(key, "DELETED")
                                del server.objects[key], server.terminating[key]
                            else:
                                server.terminating[key] -= 1
                        obj = server.objects.get(key)
                    if obj is None:
                        return self._send(404, _status_body(404, "NotFound", f'"{name}" not found'))
                    return self._send(200, obj)
                if query.get("watch") in ("true", "True", "1"):
                    return self._watch(namespace, query)
                selector = dict(t.split("=", 1) for t in filter(None, query.get("labelSelector", "").split(",")))
                with server.lock:
                    items = [o for (ns, _), o in server.objects.items() if ns == namespace and all(
                        (o["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())]
                    return self._send(200, {"kind": "JobSetList", "items": items,
                                            "metadata": {"resourceVersion": str(server.rv)}})

            def _core(self, method: str, parts: list[str], query: dict, body):
                """/api/v1/namespaces/{ns}/pods and /configmaps[/{name}]."""
                namespace, kind, name = parts[0], parts[1], (parts[2] if len(parts) > 2 else None)
                if kind == "pods" and method == "GET":
                    key, _, value = query.get("labelSelector", "").partition("=")
                    with server.lock:
                        items = [p for p in server.pods if (p["metadata"].get("labels") or {}).get(key) == value]
                    return self._send(200, {"kind": "PodList", "apiVersion": "v1", "items": items,
                                            "metadata": {"resourceVersion": str(server.rv)}})
                if kind != "configmaps":
                    return self._send(404, _status_body(404, "NotFound", "unknown path"))
                with server.lock:
                    key = (namespace, name or (body or {}).get("metadata", {}).get("name"))
                    current = server.configmaps.get(key)
                    if method == "POST":
                        if current is not None:
                            return self._send(409, _status_body(409, "AlreadyExists",
                                                                f'configmaps "{key[1]}" already exists'))
                        server.rv += 1
                        body["metadata"].update(namespace=namespace, resourceVersion=str(server.rv))
                        server.configmaps[key] = body
                        return self._send(201, body)
                    if current is None:
                        return self._send(404, _status_body(404, "NotFound", f'configmaps "{key[1]}" not found'))
                    if method == "GET":
                        return self._send(200, current)
                    if method == "PUT":
                        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                            return self._send(409, _status_body(409, "Conflict", f'Operation cannot be fulfilled on '
                                                                f'configmaps "{key[1]}": the object has been modified'))
                        server.rv += 1
                        body["metadata"].update(namespace=namespace, resourceVersion=str(server.rv))
                        server.configmaps[key] = body
                        return self._send(200, body)
                    del server.configmaps[key]
                    return self._send(200, _status_body(200, "", "deleted") | {"status": "Success"})

            def _line(self, event: dict) -> None:
                data = (json.dumps(event) + "\n").encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _watch(self, namespace: str, query: dict) -> None:
                name = query.get("fieldSelector", "").partition("metadata.name=")[2]
                since = int(query.get("resourceVersion") or 0)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    with server.lock:
                        if server.watch_gone:
                            server.watch_gone -= 1
                            self._line({"type": "ERROR", "object": _status_body(
                                410, "Expired", f"too old resource version: {since}")})
                            return
                    while True:
                        with server.lock:
                            pending = [(rv, kind, obj) for rv, kind, obj in server.events
                                       if rv > since and obj["metadata"]["name"] == name
                                       and obj["metadata"].get("namespace") == namespace]
                        for rv, kind, obj in pending:
                            self._line({"type": kind, "object": obj})
                            since = rv
                        with server.lock:
                            if not server.script:
                                server.lock.wait(timeout=0.3)
                                if not server.script:
                                    return
                            entry = server.script.pop(0)
                            if entry == "end-stream":
                                return
                            if entry == "410":
                                server.watch_gone += 1
                                return
                            if entry in ("401", "429", "503"):
                                server.pending_errors.append(int(entry))
                                return
                            server.objects[(namespace, name)]["status"] = entry
                            server._bump((namespace, name), "MODIFIED")
                finally:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()

            def do_GET(self):
                self._route("GET")

            def do_POST(self):
                self._route("POST")

            def do_DELETE(self):
                self._route("DELETE")

            def do_PUT(self):
                self._route("PUT")

        return Handler
