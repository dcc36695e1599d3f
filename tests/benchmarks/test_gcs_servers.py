"""Benchmark 11's probes (benchmarks/gcs_servers.py) tell a server that does a thing from one that does not: run
against the rehearsal's GCS server and gcp-storage-emulator, each a process on 127.0.0.1, without the 2,500-object
seeding of the full run. What the probes check is the GCS JSON API's documented behaviour:
https://cloud.google.com/storage/docs/json_api/v1/buckets#resource (hierarchicalNamespace),
https://cloud.google.com/storage/docs/json_api/v1/status-codes (403, 503)."""

from __future__ import annotations

import pytest

from benchmarks import gcs_servers as bench

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def running(tmp_path):
    started = [bench.start_ours(tmp_path), bench.start_emulator(tmp_path)]
    yield started
    for server in started:
        server.stop()


def test_the_probes_see_hns_and_faults_on_ours_and_their_absence_on_the_emulator(running):
    ours, emulator = running
    hns = {server.name: bench.probe_hns(server) for server in running}
    assert hns[ours.name]["hns flag kept"]["ok"] and hns[ours.name]["hns needs uniform access"]["ok"]
    assert not hns[emulator.name]["hns flag kept"]["ok"]  # it drops the field (shared/notes/facts.md)
    assert not hns[emulator.name]["hns needs uniform access"]["ok"]
    bench.seed(ours, [f"s/{name}" for name in bench.SEMANTICS])
    faults = bench.probe_faults(ours)
    assert all(check["ok"] for check in faults.values()), faults
    assert not any(check["ok"] for check in bench.probe_faults(emulator).values())
    assert bench.attempt(lambda: bench.written_file_listed(ours))["ok"]
    assert not bench.attempt(lambda: bench.written_file_listed(emulator))["ok"]
