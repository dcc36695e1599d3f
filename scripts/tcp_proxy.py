"""A TCP forwarder that scripts/airflow_topology.py puts between Airflow and a service it reaches by name in
docker-compose.yaml (the metadata database, the broker, the api-server), so a soak can make that service
unreachable for Airflow alone (PostgreSQL and Redis are the machine's, shared with other work: never stopped).

- Several backends: each new connection goes to the next one in turn and, when that one refuses, to the one after
  (a stand-in for Docker's DNS round robin over a service's replicas: the name resolves to every replica's address
  and Python's `socket.create_connection`, which the Task SDK's httpx client uses, tries each address in order).
- `SIGUSR1`: down. The listening socket is closed (new connections are refused) and every open connection is
  reset, as when the service's host goes away. `SIGUSR2`: up again on the same port.
- `SIGTERM`/`SIGINT`: exit.

    python -m scripts.tcp_proxy --listen 127.0.0.1:PORT --backend 127.0.0.1:5432 [--backend HOST:PORT ...]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal
import socket
import struct
import sys

CONNECT_TIMEOUT_S = 10.0


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"address {text!r}: expected HOST:PORT, e.g. 127.0.0.1:5432")
    return host, int(port)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (SO_LINGER 0), not a FIN: the peer sees its connection reset."""
    sock = writer.get_extra_info("socket")
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    writer.transport.abort()


class Proxy:
    def __init__(self, listen: tuple[str, int], backends: list[tuple[str, int]]) -> None:
        self.listen, self.backends = listen, backends
        self._turn = itertools.cycle(range(len(backends)))
        self.server: asyncio.base_events.Server | None = None
        self.open: set[asyncio.StreamWriter] = set()

    async def up(self) -> None:
        if self.server is None:
            self.server = await asyncio.start_server(self._handle, *self.listen, reuse_address=True)
            print(f"up on {self.listen[0]}:{self.listen[1]} -> {self.backends}", flush=True)

    def down(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        for writer in list(self.open):
            _reset(writer)
        self.open.clear()
        print("down: listening stopped, open connections reset", flush=True)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        first = next(self._turn)
        for i in range(len(self.backends)):
            host, port = self.backends[(first + i) % len(self.backends)]
            try:
                return await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT_S)
            except (OSError, asyncio.TimeoutError):
                continue  # the next replica, as create_connection tries the next address
        return None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backend = await self._connect()
        if backend is None:
            _reset(writer)
            return
        up_reader, up_writer = backend
        self.open.update((writer, up_writer))
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for end in (writer, up_writer):
                self.open.discard(end)
                end.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            _reset(writer)  # one side reset: the other is reset too
            return
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except OSError:
            pass


async def _serve(listen: tuple[str, int], backends: list[tuple[str, int]]) -> None:
    proxy, done = Proxy(listen, backends), asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, proxy.down)
    loop.add_signal_handler(signal.SIGUSR2, lambda: loop.create_task(proxy.up()))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    await proxy.up()
    await done.wait()
    proxy.down()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=_address, required=True)
    parser.add_argument("--backend", type=_address, action="append", required=True)
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.listen, args.backend))
    return 0


if __name__ == "__main__":
    sys.exit(main())
