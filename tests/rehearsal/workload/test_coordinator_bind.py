"""The local workload's JAX coordinator listens on the loopback only (issue 33 item 2).

`jax.distributed.initialize` binds its coordinator service to `[::]:<port>` (every interface) unless given
`coordinator_bind_address`, and the service has no authentication: any host that reaches the machine could join or
stall the job. On the local target every process dials 127.0.0.1, so the coordinator listens there only.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mtc_local.workload.identity import Identity

SCRIPT = """
import sys, time, types
from mtc_local.workload.identity import Identity
from mtc_local.workload.training import Workload
ident = Identity(0, 1, sys.argv[1], 1, 1, "env")
cfg = types.SimpleNamespace(jax_num_cpu_devices=1, distributed_timeout_s=30)
Workload(cfg, ident, sys.argv[2]).setup_jax()
print("ready", flush=True)
time.sleep(120)
"""


def listening(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp* writes them) of sockets listening (state 0A) on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.rpartition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


@pytest.mark.parametrize("address, bind", [("127.0.0.1:1234", "127.0.0.1:1234"), ("localhost:9", "localhost:9"),
                                           ("[::1]:9", "[::1]:9"), ("train-0.svc:1234", None)])
def test_bind_address_is_the_loopback_coordinator_itself(address, bind):
    assert Identity(0, 2, address, 1, 2, "env").coordinator_bind_address == bind


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the listening sockets from /proc/net/tcp")
def test_a_real_coordinator_listens_on_127_0_0_1_only(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, f"127.0.0.1:{port}", str(tmp_path / "events.jsonl")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 90
        while not listening(port) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        addresses = listening(port)
        assert addresses, proc.stderr.read() if proc.poll() is not None else "no listener within 90 s"
        # 0100007F is 127.0.0.1 in /proc's byte order (gRPC may hold it as the IPv4-mapped ::ffff:127.0.0.1);
        # all zeros (0.0.0.0 or ::) would be every interface.
        assert addresses and addresses <= {"0100007F", "0000000000000000FFFF00000100007F"}, addresses
    finally:
        proc.kill()
        proc.wait(10)
