"""The one fault-kind table: every kind once, in one scope, with an action the runner takes."""

from __future__ import annotations

from mtc_local.faults import kinds as K


def test_fault_kinds_are_one_table():
    assert K.FAULT_KIND_NAMES == tuple(row.kind for row in K.FAULT_KINDS)
    assert len(set(K.FAULT_KIND_NAMES)) == len(K.FAULT_KINDS)
    assert {row.scope for row in K.FAULT_KINDS} == {"host", "slice", "bucket"}
    assert not set(K.HOST_FAULT_KINDS) & set(K.BUCKET_FAULT_KINDS)
    assert {row.action for row in K.FAULT_KINDS} <= {"sigkill", "sigterm", "sigstop", "wipe_ramdisk", "hold_pending",
                                                    "fail_listings"}
    assert {row.when for row in K.FAULT_KINDS} == {"step", "start"}
    assert set(K.START_FAULT_KINDS) == {"image_pull", "unschedulable", "mount_failure"}
