"""Pure core: which steps are finalized, the GCS incremental-listing helpers, and progress tracking."""

from __future__ import annotations

import fnmatch

import pytest

from mtc_provider.core.measure.listing import (
    backup_steps,
    commit_glob,
    complete_backups,
    data_complete,
    finalized_from_objects,
    longer_steps_glob,
    newer_than,
    parse_mtc_backup,
    same_length_glob,
    start_offset_after,
    step_of_dir,
)
from mtc_provider.core.measure.progress import ProgressTracker


@pytest.mark.parametrize("name, step", [
    ("12", 12), ("12/", 12), ("0", 0), ("12.orbax-checkpoint-tmp", None), ("12.orbax-checkpoint-tmp-3", None),
    ("12.orbax-checkpoint-tmp-1712345678", None), ("checkpoint_12", None), ("abc", None), ("-1", None),
])
def test_step_of_dir(name, step):
    assert step_of_dir(name) == step


def test_finalized_from_objects_needs_the_commit_file_in_the_step_folder():
    entries = {"1": ["commit_success.txt", "default"], "2": ["default"], "3.orbax-checkpoint-tmp": ["commit_success.txt"],
               "4": [], "10": ["_CHECKPOINT_METADATA", "commit_success.txt"], "notes": ["commit_success.txt"]}
    names = [f"{step}/{name}" for step, children in entries.items() for name in children]
    assert finalized_from_objects(names) == [1, 10]


def test_finalized_from_objects():
    names = ["run/ckpt/1/commit_success.txt", "run/ckpt/1/default/x", "run/ckpt/2/default/x",
             "run/ckpt/3.orbax-checkpoint-tmp/commit_success.txt", "run/ckpt/20/commit_success.txt",
             "run/ckpt/5/default/commit_success.txt", "other/7/commit_success.txt"]
    assert finalized_from_objects(names, "run/ckpt") == [1, 20]


def test_mtc_backups():
    assert parse_mtc_backup("x/my-job-s100-n2-w3.meta").step == 100
    assert parse_mtc_backup("my-job-s100-n2-w3.data") is None
    names = ["j-s10-n0-w0.meta", "j-s10-n1-w0.meta", "j-s20-n0-w0.meta", "junk.meta"]
    assert backup_steps(names) == [10, 20]
    assert backup_steps(names, workers=2) == [10]


def test_newer_than_never_goes_backwards():
    assert newer_than([5, 3, 9, 9], 5) == [9]
    assert newer_than([5, 3], None) == [3, 5]


@pytest.mark.parametrize("last", [9, 99, 100, 123, 999])
def test_incremental_listing_covers_exactly_the_newer_steps(last):
    """startOffset + the longer-names glob together select every step > last, and none <= last (GCS semantics:
    names sorted as strings; a glob `?` is one character, `*` any run without '/')."""
    prefix = "run/checkpoints"
    markers = [f"{prefix}/{s}/commit_success.txt" for s in range(0, 5000)]
    offset = start_offset_after(prefix, last)
    by_offset = {m for m in markers if m >= offset and fnmatch.fnmatchcase(m, same_length_glob(prefix, last))}
    by_length = {m for m in markers if fnmatch.fnmatchcase(m, longer_steps_glob(prefix, last))}
    selected = {int(m.split("/")[2]) for m in by_offset | by_length}
    assert selected == set(range(last + 1, 5000))
    assert not any(fnmatch.fnmatchcase(m, commit_glob(prefix)) for m in ["run/checkpoints/1.orbax-checkpoint-tmp/x"])


def test_tracker_rate_stall_and_backwards_steps():
    tracker = ProgressTracker(started_at=0.0, window_s=3600)
    assert tracker.stalled(now=50, stall_timeout=60) is False
    assert tracker.stalled(now=61, stall_timeout=60) is True  # nothing at all since watching began
    assert tracker.observe(100, commit_time=55.0, now=61) is True
    assert tracker.observe(100, commit_time=55.0, now=70) is False
    assert tracker.observe(50, commit_time=80.0, now=90) is False  # backwards: ignored, stall clock not reset
    assert tracker.stalled(now=121, stall_timeout=60) is False
    assert tracker.stalled(now=122, stall_timeout=60) is True
    assert tracker.observe(200, commit_time=1855.0, now=1860) is True
    assert tracker.steps_per_hour(now=1860) == pytest.approx(100 * 3600 / 1800)
    assert tracker.seconds_since_checkpoint(now=1900) == 45.0
    progress = tracker.progress(now=1900).to_payload()
    assert progress == {"latest_step": 200, "commit_time": 1855.0, "steps_per_hour": 200.0,
                        "seconds_since_checkpoint": 45.0}
    # Outside the window only one point remains: no rate.
    assert tracker.steps_per_hour(now=1855 + 3600 - 1) is None


@pytest.mark.parametrize("metas, expected", [
    ([("2026-12-06_10-00/j-s5-n0-w0.meta", 9), ("2026-12-06_10-00/j-s5-n1-w0.meta", 9)], {5: {"2026-12-06_10-00": 2}}),
    ([("2026-12-06_10-00/j-s5-n0-w0.meta", 9), ("2026-12-06_10-01/j-s5-n1-w0.meta", 9)],
     {5: {"2026-12-06_10-00": 1, "2026-12-06_10-01": 1}}),  # one step's nodes backed up a minute apart
    ([("2026-12-06_10-00/j-s5-n0-w0.meta", 9)], {}),  # node 1 has not backed up step 5 yet
    ([("2026-12-06_10-00/j-s5-n0-w0.meta", 9), ("2026-12-06_10-00/j-s5-n1-w0.meta", 0)], {}),  # torn
    ([("2026-12-06_10-00/j-2-s5-n0-w0.meta", 9), ("2026-12-06_10-00/j-2-s5-n1-w0.meta", 9)], {}),  # job j-2
    ([("x/j-s5-n0-w0.meta", 9), ("x/j-s5-n1-w0.meta", 9)], {}),  # not a replicator time folder
    ([("2026-12-06_10-00/j-s5-n0-w0.meta", 9), ("2026-12-06_10-00/j-s5-n2-w0.meta", 9)], {}),  # n2: not this run
])
def test_complete_backups_need_every_node_of_this_job_in_a_time_folder(metas, expected):
    assert complete_backups(metas, "j", 2) == expected


def test_a_folder_needs_a_data_folder_per_backup_it_holds():
    assert data_complete(2, ["D1.data/", "D2.data/"]) and not data_complete(2, ["D1.data/", "notes/"])
    with pytest.raises(ValueError, match="nodes must be at least 1"):
        complete_backups([], "j", 0)
