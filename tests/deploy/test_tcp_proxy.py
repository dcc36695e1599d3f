"""scripts/tcp_proxy.py, the topology's stand-in for Docker's network: round robin over a service's replicas with
the next one tried when one refuses (Python's `socket.create_connection` "tries to connect to all possible
addresses in turn until a connection succeeds", docs.python.org socket module; Docker's DNS answers a service name
with every replica's address), and an outage switch: SIGUSR1 refuses new connections and resets open ones,
SIGUSR2 listens again. A real process, real sockets on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from scripts.airflow_topology import REPO, _accepts, free_port, wait_until


class _Named(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(1024):
            self.request.sendall(self.server.name + b":" + data)  # type: ignore[attr-defined]


def _backend(name: bytes) -> socketserver.ThreadingTCPServer:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Named)
    server.daemon_threads = True
    server.name = name  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _ask(port: int, text: bytes = b"hi") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(text)
        return sock.recv(1024)


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[int, list[socketserver.ThreadingTCPServer], subprocess.Popen]]:
    one, two = _backend(b"one"), _backend(b"two")
    dead = free_port()  # a replica that is down: nothing listens there, connections are refused
    port = free_port()
    argv = [sys.executable, "-m", "scripts.tcp_proxy", "--listen", f"127.0.0.1:{port}"]
    for backend in (f"127.0.0.1:{one.server_address[1]}", f"127.0.0.1:{dead}", f"127.0.0.1:{two.server_address[1]}"):
        argv += ["--backend", backend]
    proc = subprocess.Popen(argv, cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until("the forwarder listening", lambda: _accepts(f"127.0.0.1:{port}"), 60, interval=0.1)
        yield port, [one, two], proc
    finally:
        proc.terminate()
        proc.wait(30)
        for server in (one, two):
            server.shutdown()
            server.server_close()


def test_connections_go_round_robin_and_a_refusing_replica_is_passed_over(proxy):
    port, _, _ = proxy
    answers = [_ask(port) for _ in range(6)]
    assert set(answers) == {b"one:hi", b"two:hi"}  # both live replicas serve; the dead one never fails a client
    assert answers.count(b"two:hi") >= 2


def test_an_outage_refuses_new_connections_resets_open_ones_and_ends_on_sigusr2(proxy):
    port, _, proc = proxy
    held = socket.create_connection(("127.0.0.1", port), timeout=10)
    held.sendall(b"a")
    assert held.recv(1024).endswith(b":a")
    os.kill(proc.pid, signal.SIGUSR1)
    wait_until("new connections refused", lambda: not _accepts(f"127.0.0.1:{port}"), 30, interval=0.1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)
    with pytest.raises((ConnectionResetError, BrokenPipeError)):
        held.sendall(b"b")
        if not held.recv(1024):
            raise ConnectionResetError("closed")
    held.close()
    os.kill(proc.pid, signal.SIGUSR2)
    wait_until("listening again", lambda: _accepts(f"127.0.0.1:{port}"), 30, interval=0.1)
    assert _ask(port, b"c").endswith(b":c")
