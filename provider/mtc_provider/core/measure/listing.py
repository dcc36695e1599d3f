"""Which steps of a checkpoint directory are finalized, from names alone (object names or directory entries).

What MaxText writes (0.2.5 with Orbax 0.12): persistent steps under `<base_output_directory>/<run_name>/
checkpoints/<step>/`. While a save is in flight the step lives in `<step>.orbax-checkpoint-tmp` (older
releases add `-<n>` or `-<timestamp>`) on a local disk, or without `commit_success.txt` on GCS. Orbax
finalizes a step by updating `<step>/_CHECKPOINT_METADATA` (its commit timestamp) and then writing
`<step>/commit_success.txt` (before the rename, on a local disk), so the commit marker, written last, is the
one name that decides. The state is in one item folder whose name depends on the mode (ITEM_DIRS).
GKE MTC's replicator backs steps up as `<job>-s<step>-n<node>-w<worker>.meta`.
Steps going backwards never count: `newer_than` is the one place that rule lives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

COMMIT_FILE = "commit_success.txt"
# The item folder inside a step, by who wrote it (read in maxtext/common/checkpointing.py, emergency_checkpointing.py
# and orbax/checkpoint/experimental/emergency/checkpoint_manager.py):
ITEM_DIRS = {
    "items": "MaxText's persistent checkpoints without a local tier (Orbax v1 checkpointable `items`)",
    "default": "persistent checkpoints of Orbax's emergency CheckpointManager (enable_emergency_checkpoint; the local "
               "target's workload)",
    "state": "the local (ramdisk) tier of the emergency and replicator managers",
}
STEP_DIR_RE = re.compile(r"^(?P<step>\d+)$")
TMP_DIR_RE = re.compile(r"\.orbax-checkpoint-tmp")
# The replicator's time folder under `<bucket>/<run_name>/` (ml-auto-solutions `validation_util.py`)
BACKUP_FOLDER_RE = re.compile(r"^\d{4}-\d{2}-\d{2}_\d{2}-\d{2}$")
MTC_BACKUP_RE = re.compile(r"^(?P<job>.+)-s(?P<step>\d+)-n(?P<node>\d+)-w(?P<worker>\d+)\.meta$")


@dataclass(frozen=True)
class MtcBackup:
    job: str
    step: int
    node: int
    worker: int


def step_of_dir(name: str) -> int | None:
    """The step a directory name stands for, or None (in-flight tmp dirs and anything not a plain integer)."""
    name = name.rstrip("/")
    if TMP_DIR_RE.search(name):
        return None
    match = STEP_DIR_RE.match(name)
    return int(match["step"]) if match else None


def item_of(children: Iterable[str]) -> str | None:
    """Which item folder a step directory holds (names inside it, a trailing '/' allowed), or None."""
    names = {name.rstrip("/") for name in children}
    return next((item for item in ITEM_DIRS if item in names), None)


def finalized_from_objects(names: Iterable[str], prefix: str = "") -> list[int]:
    """Finalized steps from object names (relative to `prefix`, a directory): `<step>/commit_success.txt`."""
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    steps: set[int] = set()
    for name in names:
        if prefix and not name.startswith(prefix):
            continue
        parts = name[len(prefix):].split("/")
        if len(parts) == 2 and parts[1] == COMMIT_FILE and (step := step_of_dir(parts[0])) is not None:
            steps.add(step)
    return sorted(steps)


def parse_mtc_backup(name: str) -> MtcBackup | None:
    """An MTC replicator backup from an object name (any directory part is ignored), or None."""
    match = MTC_BACKUP_RE.match(name.rsplit("/", 1)[-1])
    if not match:
        return None
    return MtcBackup(match["job"], int(match["step"]), int(match["node"]), int(match["worker"]))


def backup_steps(names: Iterable[str], workers: int | None = None) -> list[int]:
    """Steps with MTC backups, ascending; with `workers`, only steps backed up by that many (node, worker) pairs."""
    seen: dict[int, set[tuple[int, int]]] = {}
    for name in names:
        backup = parse_mtc_backup(name)
        if backup is not None:
            seen.setdefault(backup.step, set()).add((backup.node, backup.worker))
    return sorted(step for step, pairs in seen.items() if workers is None or len(pairs) >= workers)


def complete_backups(metas: Iterable[tuple[str, int]], job: str, nodes: int) -> dict[int, dict[str, int]]:
    """step -> {time folder: how many of its node backups it holds}, for the steps a new start can restore every
    node from: each node rank 0..nodes-1 has a non-empty `<job>-s<step>-n<node>-w<worker>.meta` of the step in a
    time folder directly under the run's backup folder. `metas` are (name relative to that folder, size in bytes).

    Not restorable, so left out: a step some node has not backed up yet (an upload in progress, a node lost
    mid-backup), a torn (empty) `.meta`, another job's backup (`a` is not `a-2`: the job name matches exactly) and
    anything outside a `YYYY-MM-DD_HH-MM` folder of this run (the same run name elsewhere in the bucket). Whether
    each folder also holds the data its `.meta`s name is `data_complete`'s question, asked of the newest steps only.
    """
    if nodes < 1:
        raise ValueError(f"nodes must be at least 1, got {nodes!r}")
    found: dict[int, dict[int, str]] = {}
    for name, size in metas:
        folder, _, base = name.rpartition("/")
        backup = parse_mtc_backup(base)
        if (backup is None or backup.job != job or not BACKUP_FOLDER_RE.match(folder) or size <= 0
                or not 0 <= backup.node < nodes):
            continue
        found.setdefault(backup.step, {})[backup.node] = folder
    complete: dict[int, dict[str, int]] = {}
    for step, by_node in found.items():
        if len(by_node) == nodes:
            folders = complete[step] = {}
            for folder in by_node.values():
                folders[folder] = folders.get(folder, 0) + 1
    return complete


def data_complete(node_backups: int, data_folders: Iterable[str]) -> bool:
    """Whether a time folder holding `node_backups` `.meta`s also holds as many `D<hash>.data/` folders (the
    replicator writes each node's data before its `.meta`, so a `.meta` without data beside it is dangling: its data
    was deleted, by a lifecycle rule or by hand)."""
    return sum(1 for name in data_folders if name.rstrip("/").endswith(".data")) >= node_backups


def newer_than(steps: Iterable[int], after: int | None) -> list[int]:
    """Steps strictly after `after` (None: all), ascending: a step at or below the last one seen never counts."""
    return sorted(step for step in set(steps) if after is None or step > after)


def commit_glob(prefix: str) -> str:
    """A GCS matchGlob selecting exactly one object per finalized step: its commit marker."""
    return f"{prefix.rstrip('/')}/*/{COMMIT_FILE}"


def start_offset_after(prefix: str, step: int) -> str:
    """A GCS startOffset skipping every step name of the same digit count up to and including `step`.

    Names sort as strings, so `<prefix>/<step>0` is above `<step>/...` (`/` < `0`) and below any same-length
    larger number. Use it with `same_length_glob`: shorter numbers can sort higher ("2" > "123"), and longer
    ones lower ("100" < "99"), which `longer_steps_glob` covers.
    """
    return f"{prefix.rstrip('/')}/{step}0"


def same_length_glob(prefix: str, step: int) -> str:
    """A matchGlob for commit markers of steps with as many digits as `step`."""
    return f"{prefix.rstrip('/')}/{'?' * len(str(step))}/{COMMIT_FILE}"


def longer_steps_glob(prefix: str, step: int) -> str:
    """A matchGlob for commit markers of steps with more digits than `step` (all larger than it)."""
    return f"{prefix.rstrip('/')}/{'?' * (len(str(step)) + 1)}*/{COMMIT_FILE}"


def describe_listing_error(exc: BaseException) -> str:
    """`HTTP 503 ServiceUnavailable: <message>` for an API answer; the exception type for a timeout or reset."""
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return f"HTTP {code} {type(exc).__name__}: {getattr(exc, 'message', exc)}"
    return f"{type(exc).__name__}: {exc} (no HTTP answer)"


@dataclass
class ListingOutage:
    """A checkpoint listing that keeps failing. A failed listing is not "no progress": its time is taken off the
    stall clocks once a listing answers again; failing for longer than `timeout` seconds ends the watch."""

    checkpoint_dir: str
    timeout: float
    since: float | None = None

    def failed(self, now: float, exc: BaseException) -> tuple[str, str]:
        """(the warning line, the end's message: "" while within `timeout`)."""
        self.since = now if self.since is None else self.since
        failing, error = now - self.since, describe_listing_error(exc)
        line = (f"listing {self.checkpoint_dir} failed ({error}); the stall clock is paused while listing fails "
                f"({failing:.0f}s of listing_timeout {self.timeout:.0f}s)")
        if failing <= self.timeout:
            return line, ""
        d = self.checkpoint_dir
        bucket = d.split("/")[2] if d.startswith("gs://") else d
        return line, (f"the checkpoint listing of {d} (bucket {bucket}) kept failing for {failing:.0f}s "
                      f"(listing_timeout {self.timeout:.0f}s): {error}")

    def answered(self, now: float) -> float | None:
        """The seconds the listing failed until it answered now (the stall clocks' pause), or None."""
        failed, self.since = (None if self.since is None else now - self.since), None
        return failed
