"""The topology's own failures of Airflow's services (scripts/airflow_topology.py), without starting Airflow:
the forwarders make the machine's real Redis and PostgreSQL unreachable for this topology alone, and
`restart_always()` restarts a replica that exits with Docker's doubling delay ("an increasing delay (double the
previous delay, starting at 100 milliseconds)", docs.docker.com "Start containers automatically") but never one
killed on purpose."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts.airflow_topology import REDIS_URL, Topology, wait_until


@pytest.fixture
def topology(tmp_path: Path):
    topo = Topology(tmp_path)
    topo.start_forwarders()
    try:
        yield topo
    finally:
        for proc in topo.forwarders.values():
            proc.terminate()
            proc.wait(30)


def test_a_redis_outage_refuses_this_topology_only_and_ends(topology: Topology):
    import redis

    through = redis.Redis.from_url(topology.places.redis_url, socket_connect_timeout=5)
    assert through.ping()
    topology.outage("redis")
    with pytest.raises(redis.ConnectionError):
        through.ping()  # the open connection was reset, a new one is refused
    assert redis.Redis.from_url(REDIS_URL, socket_connect_timeout=5).ping()  # the machine's Redis serves on
    topology.outage("redis", unreachable=False)
    assert redis.Redis.from_url(topology.places.redis_url, socket_connect_timeout=5).ping()
    assert topology.down == set()


def test_a_database_outage_refuses_airflows_connection_string(topology: Topology):
    import psycopg2

    airflow_dsn = topology.places.airflow_sql_alchemy_conn.replace("+psycopg2", "", 1).rsplit("/", 1)[0] + "/postgres"
    with psycopg2.connect(airflow_dsn, connect_timeout=10) as conn, conn.cursor() as cur:
        cur.execute("SELECT 1")
    topology.outage("postgres")
    with pytest.raises(psycopg2.OperationalError):
        psycopg2.connect(airflow_dsn, connect_timeout=10)
    topology.outage("postgres", unreachable=False)
    with psycopg2.connect(airflow_dsn, connect_timeout=10) as conn, conn.cursor() as cur:
        cur.execute("SELECT 1")


def test_restart_always_restarts_what_exits_with_a_doubling_delay_never_what_was_killed(tmp_path: Path,
                                                                                      monkeypatch):
    topo = Topology(tmp_path)
    spawned: list[str] = []

    def spawn(name: str) -> None:  # a replica that exits at once, every time (e.g. no database to reach)
        spawned.append(name)
        topo.procs[name] = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
        topo.procs[name].started_at = time.monotonic()  # type: ignore[attr-defined]

    monkeypatch.setattr(topo, "spawn", spawn)
    spawn("airflow-scheduler-1")
    spawn("airflow-worker-1")
    topo.killed.add("airflow-worker-1")  # killed on purpose by a test: the test restarts it
    topo.restart_always(interval=0.05)
    try:
        wait_until("three restarts", lambda: spawned.count("airflow-scheduler-1") >= 4, 60, interval=0.1)
        topo.check_alive()  # exited replicas are restarted, not a failure, while restart_always() runs
    finally:
        topo._restarting = False
        topo._restarter.join(10)
    delays = [r["delay_s"] for r in topo.restarts if r["replica"] == "airflow-scheduler-1"]
    assert delays[:3] == [0.1, 0.2, 0.4] and all(r["exited"] == 3 for r in topo.restarts)
    assert spawned.count("airflow-worker-1") == 1
