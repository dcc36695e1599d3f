"""What a run can resume from, out of one listing (adapters.checkpoint_stores.Newest): the newest finalized
persistent checkpoint, or an MTC replicator backup complete on every node when it is newer (and newer than the step
the listing started after). Plain values: the listing itself is tested against real stores elsewhere."""

from __future__ import annotations

import pytest

from mtc_provider.adapters.checkpoint_stores import Newest
from mtc_provider.adapters.protocols import CheckpointInfo

SAVED = CheckpointInfo(100, "gs://b/run/checkpoints/100", 5.0)


def _backup(step: int) -> CheckpointInfo:
    return CheckpointInfo(step, "gs://b/run (MTC replicator backup)", None)


@pytest.mark.parametrize("persistent, backup, after, expected", [
    (SAVED, None, None, SAVED),  # no backups listed
    (SAVED, 120, None, _backup(120)),  # a newer complete backup
    (SAVED, 100, None, SAVED),  # a backup of the same step: the persistent one (it has a commit time)
    (SAVED, 90, None, SAVED),  # an older backup
    (None, 120, 130, None),  # a backup not newer than the step the listing started after
    (None, 120, 110, _backup(120)),
    (None, None, None, None),
])
def test_the_restorable_checkpoint_is_the_newest_of_both_tiers(persistent, backup, after, expected):
    assert Newest((persistent,) if persistent else (), backup, "gs://b/run/", after).restorable() == expected
