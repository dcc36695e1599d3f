"""The one table of fault kinds a fault plan may name: what each hits, does and stands for, and when it may fire.
The plan's validator (plan.py, fields.py) and the runner (mtc_local.runner.faults) read it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FaultKind:
    """One kind of fault: what it hits (`host`: one process, `slice`: every host of a slice, `bucket`: the home's
    local GCS), what it does, and when it may fire (`step`: at_step or at_seconds; `start`: when the attempt's
    pods are created, i.e. at_step absent or 0)."""

    kind: str
    scope: str  # host | slice | bucket
    action: str  # sigkill | sigterm (graceful) | sigstop | wipe_ramdisk (then SIGKILL) | hold_pending | fail_listings
    stands_for: str
    when: str = "step"  # step | start


FAULT_KINDS: tuple[FaultKind, ...] = (
    FaultKind("sigkill_host", "host", "sigkill", "a host's hardware failure"),
    FaultKind("wipe_ramdisk", "host", "wipe_ramdisk", "a replaced node: its ramdisk is gone"),
    FaultKind("sigterm_slice", "slice", "sigterm", "a slice's preemption"),
    FaultKind("kill_slice", "slice", "sigkill", "a whole slice lost at once"),
    FaultKind("hang", "slice", "sigstop", "a slice that stops making progress"),
    FaultKind("image_pull", "slice", "hold_pending", "an image the nodes cannot pull (wrong tag, no pull secret)",
              when="start"),
    FaultKind("unschedulable", "slice", "hold_pending", "no capacity for the slice's pods (a stockout, a quota)",
              when="start"),
    FaultKind("mount_failure", "slice", "hold_pending", "the MTC CSI ramdisk mount fails on the slice's nodes (no "
              "CheckpointConfiguration selects them, the MTC node components not ready)", when="start"),
    FaultKind("listing_outage", "bucket", "fail_listings",
              "the bucket's listings fail (a revoked storage.objects.list, a rate limit, a backend error)"),
)
FAULT_KIND_NAMES: tuple[str, ...] = tuple(f.kind for f in FAULT_KINDS)
HOST_FAULT_KINDS: tuple[str, ...] = tuple(f.kind for f in FAULT_KINDS if f.scope == "host")
BUCKET_FAULT_KINDS: tuple[str, ...] = tuple(f.kind for f in FAULT_KINDS if f.scope == "bucket")
START_FAULT_KINDS: tuple[str, ...] = tuple(f.kind for f in FAULT_KINDS if f.when == "start")
# The statuses a listing outage may answer with
# (GCS JSON API: https://cloud.google.com/storage/docs/json_api/v1/status-codes).
LISTING_OUTAGE_STATUSES: tuple[int, ...] = (403, 429, 503)
