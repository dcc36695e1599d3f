"""A cost model for the local target's "bucket" (the persistent tier), so restores and saves pay what a GCS
bucket charges and the local tier's trade-off can show.

Locally the persistent tier is a directory on a page-cached disk: a restore from it takes milliseconds, faster
than the emergency manager's local-tier restore. On GKE it is a GCS bucket: every object costs a round trip
and every byte crosses the host's network. The model adds, per host, ``ceil(objects / concurrency) x latency +
bytes / bandwidth`` to each persistent restore (before the restore reads) and to each persistent save (in the
background, as Orbax's async upload; the next persistent save and the final wait join it).

Off by default. The local runner's pods inherit the supervisor's environment, so a benchmark turns it on with:

- ``MTC_BUCKET_LATENCY_MS``: per-request latency, default 50 ms when only the bandwidth is set;
- ``MTC_BUCKET_MB_PER_S``: per-host bandwidth in MB/s (10^6 bytes), default 200 when only the latency is set;
- ``MTC_BUCKET_CONCURRENCY``: requests in flight at once, default 32 (TensorStore's default GCS request
  concurrency, which Orbax's reads and writes go through).

Defaults (documented in docs/benchmarks.md with their sources): GCS documents typical first-byte latencies of
tens of milliseconds for regional buckets, and per-VM read throughput limited by the VM's egress and a
single stream to a few hundred MB/s; 50 ms and 200 MB/s sit inside those ranges and are meant to be
overridden.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

LATENCY_ENV = "MTC_BUCKET_LATENCY_MS"
BANDWIDTH_ENV = "MTC_BUCKET_MB_PER_S"
DEFAULT_LATENCY_MS = 50.0
DEFAULT_MB_PER_S = 200.0
CONCURRENCY_ENV = "MTC_BUCKET_CONCURRENCY"
DEFAULT_CONCURRENCY = 32


@dataclass(frozen=True)
class BucketCost:
    latency_s: float
    bytes_per_s: float
    concurrency: int = DEFAULT_CONCURRENCY

    def seconds(self, objects: int, nbytes: int) -> float:
        return math.ceil(objects / self.concurrency) * self.latency_s + nbytes / self.bytes_per_s


def _positive(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ValueError(f"{name}={raw!r}: expected a positive number")
    return value


def from_env(environ: dict[str, str] | None = None) -> BucketCost | None:
    """The configured cost, or None when neither variable is set (no cost: the plain local directory)."""
    env = os.environ if environ is None else environ
    latency, bandwidth = env.get(LATENCY_ENV, ""), env.get(BANDWIDTH_ENV, "")
    if not latency and not bandwidth:
        return None
    latency_ms = _positive(LATENCY_ENV, latency) if latency else DEFAULT_LATENCY_MS
    mb_per_s = _positive(BANDWIDTH_ENV, bandwidth) if bandwidth else DEFAULT_MB_PER_S
    concurrency = env.get(CONCURRENCY_ENV, "")
    requests = int(_positive(CONCURRENCY_ENV, concurrency)) if concurrency else DEFAULT_CONCURRENCY
    return BucketCost(latency_ms / 1000.0, mb_per_s * 1e6, max(1, requests))


def step_objects(step_dir: str | os.PathLike) -> tuple[int, int]:
    """(objects, bytes) of one checkpoint step directory: what a GCS restore lists and downloads."""
    objects = nbytes = 0
    for path in Path(step_dir).rglob("*"):
        if path.is_file():
            objects += 1
            nbytes += path.stat().st_size
    return objects, nbytes


def pay_restore(cost: BucketCost | None, step_dir: str | os.PathLike, hosts_sharing: int) -> dict[str, float] | None:
    """Sleep what reading this step from a bucket costs one host (its share of the bytes, every object's
    request); return the figures for the workload's restore event."""
    if cost is None or not Path(step_dir).is_dir():
        return None
    objects, nbytes = step_objects(step_dir)
    modelled = cost.seconds(objects, nbytes // max(1, hosts_sharing))
    time.sleep(modelled)
    return {"bucket_objects": objects, "bucket_bytes": nbytes, "bucket_cost_s": round(modelled, 4)}


class UploadCost:
    """The background half of a persistent save: once the step is committed, sleep its upload cost in a thread;
    `join()` waits for it, as Orbax waits for the previous async save before starting the next."""

    def __init__(self, cost: BucketCost | None, hosts_sharing: int) -> None:
        self.cost, self.hosts_sharing = cost, max(1, hosts_sharing)
        self._thread: threading.Thread | None = None
        self.paid_s = 0.0

    def start(self, step_dir: str | os.PathLike, estimate_bytes: int, objects_estimate: int) -> None:
        if self.cost is None:
            return
        self.join()
        modelled = self.cost.seconds(objects_estimate, estimate_bytes // self.hosts_sharing)
        self.paid_s += modelled
        self._thread = threading.Thread(target=time.sleep, args=(modelled,), name="mtc-bucket-upload", daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
