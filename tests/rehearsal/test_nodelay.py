"""The rehearsal's servers answer as the real ones do on the wire: TCP_NODELAY on every connection.

kube-apiserver is Go, whose connections have no delay unless told otherwise (https://pkg.go.dev/net#TCPConn.SetNoDelay:
"The default is true (no delay)"). Python's http.server writes an answer's headers and body as two writes; with Nagle's
algorithm on, the body waits for the client's delayed ACK of the headers (about 40 ms on Linux), so every request
to the local API server or the local GCS looked 40 ms slower than the provider makes it (`benchmarks/retry_setup.py`).
"""

from __future__ import annotations

import http.client
import socket

from mtc_local.cluster.apiserver import ApiServer
from mtc_local.cluster.resources import NAMESPACES
from mtc_local.cluster.store import Store
from mtc_local.gcs.server import LocalGcs
from tests.doubles.js_outage import _NoController


def _accepted(httpd) -> list[socket.socket]:
    """The connections `httpd` accepts from now on (socketserver's get_request: accept, then the handler's setup)."""
    seen: list[socket.socket] = []
    accept = httpd.get_request

    def recording():
        sock, address = accept()
        seen.append(sock)
        return sock, address

    httpd.get_request = recording
    return seen


def _nodelay(host: str, port: int, path: str, token: str, accepted: list[socket.socket]) -> list[int]:
    """TCP_NODELAY of the server's side of a kept-alive connection, read after one whole answer."""
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        answer = conn.getresponse()
        answer.read()
        assert answer.status < 500
        return [sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for sock in accepted]
    finally:
        conn.close()


def test_api_server_connections_have_no_delay():
    store = Store()
    store.put(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    server = ApiServer(store, _NoController(store), b"nodelay-token")
    accepted = _accepted(server.httpd)
    server.start()
    try:
        flags = _nodelay("127.0.0.1", server.port, "/api/v1/namespaces/default/configmaps", "nodelay-token", accepted)
    finally:
        server.stop()
    assert flags and all(flags), flags


def test_local_gcs_connections_have_no_delay(tmp_path):
    with LocalGcs(tmp_path) as gcs:
        accepted = _accepted(gcs._httpd)
        flags = _nodelay("127.0.0.1", gcs._httpd.server_address[1], "/storage/v1/b?project=p", gcs.token.decode(),
                         accepted)
    assert flags and all(flags), flags
