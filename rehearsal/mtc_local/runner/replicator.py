"""The local rehearsal of GKE MTC's replicator, for a JobSet whose workload runs in multi-tier mode.

What it models (docs/maxtext.md, "Multi-tier mode: the local replicator"), read in Orbax
`experimental/emergency/multi_tier_checkpointing/initialization.py` and in GoogleCloudPlatform/ml-auto-solutions
`dags/orbax/maxtext_mtc_save_gcs.py` and `dags/orbax/util/validation_util.py`:

- backups: every backup interval, each node's newest local-tier step (the ramdisk's `<step>/` folder) is copied to
  `<bucket>/<run_name>/<YYYY-MM-DD_HH-MM>/D<hash>.data/`, then `<job>-s<step>-n<node>-w<worker>.meta` naming that
  folder is written beside it (data first, so a `.meta` always names whole data). `job` is the run name
  (`job-name: <run_name>` in `replicator.yaml`), `node` the pod's JAX process id (`node-rank`), `worker` 0 (one
  JAX process per host).
- restore: at a new start of the pods (a JobSet start or restart), before any workload process runs, every ramdisk
  gets the newest step it can be restored to: the newest step held by *every* ramdisk (the peers' local tier),
  else the newest *complete* backup (a `.meta` of that step from every node); steps above it are removed, so all
  processes restore the same step.

Not modelled: peer-to-peer replication between slices, the `replicator.yaml` / `.restore` hand-off files, the
replicator's own service, backups during a restore, and the object store's GCS API (the bucket is the local
target's bucket folder, listed by the provider through the local GCS).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Iterable, Mapping, Sequence

from mtc_provider.core.basics.errors import require
from mtc_provider.core.measure.listing import parse_mtc_backup
from mtc_provider.core.measure.progress import replicator_backup_dir

TIME_DIR_FORMAT = "%Y-%m-%d_%H-%M"  # the backup folder's name (ml-auto-solutions `validation_util.py`)
WORKER = 0


def meta_name(job: str, step: int, node: int, worker: int = WORKER) -> str:
    """`<job>-s<step>-n<node>-w<worker>.meta`, as the replicator names a node's backup of a step."""
    return f"{job}-s{step}-n{node}-w{worker}.meta"


def local_steps(ramdisk: Path) -> set[int]:
    """Steps saved in a ramdisk: its `<step>/` folders (a workload's unfinished save has another name)."""
    if not ramdisk.is_dir():
        return set()
    return {int(entry.name) for entry in ramdisk.iterdir() if entry.name.isdigit() and entry.is_dir()}


def complete_backups(root: Path, job: str, nodes: Iterable[int]) -> dict[int, dict[int, Path]]:
    """step -> {node: data folder} for every step that every node backed up under `root` (newest copy wins)."""
    wanted = set(nodes)
    found: dict[int, dict[int, Path]] = {}
    if not root.is_dir():
        return {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):  # time folders sort by time
        for meta in folder.glob("*.meta"):
            backup = parse_mtc_backup(meta.name)
            if backup is None or backup.job != job or backup.node not in wanted:
                continue
            try:
                name = json.loads(meta.read_text())["data"]
            except (OSError, ValueError, KeyError, TypeError):
                continue  # unreadable: not a backup anybody could restore
            data = folder / name if isinstance(name, str) and name and "/" not in name and name != ".." else None
            if data is None or data.is_symlink() or not data.is_dir():
                continue  # a `.meta` whose data is gone (or names none of this folder's): incomplete
            found.setdefault(backup.step, {})[backup.node] = data
    return {step: nodes_ for step, nodes_ in found.items() if set(nodes_) == wanted}


def newest_complete_backup(root: Path, job: str, nodes: Iterable[int]) -> int | None:
    """The newest step with a backup from every node, or None: what MTC can restore every ramdisk to."""
    steps = complete_backups(root, job, nodes)
    return max(steps) if steps else None


@dataclass
class Replicator:
    """One JobSet's replicator: `ramdisks` maps each node (JAX process id) to its ramdisk folder."""

    job: str
    root: Path  # <bucket>/<run_name>
    interval_steps: int | None = None
    interval_seconds: float | None = None
    backed_up: int | None = None
    last_backup_at: float = field(default_factory=time.time)

    def backup_due(self, ramdisks: Mapping[int, Path], now: float) -> bool:
        step = self._common_step(ramdisks)
        if step is None or (self.backed_up is not None and step <= self.backed_up):
            return False
        if self.interval_steps is not None:
            return self.backed_up is None or step >= self.backed_up + self.interval_steps
        return now - self.last_backup_at >= (self.interval_seconds or 0)

    def backup(self, ramdisks: Mapping[int, Path], now: float | None = None) -> int | None:
        """Copy the newest step every ramdisk holds to a new backup; its step, or None when there is nothing new."""
        now = time.time() if now is None else now
        step = self._common_step(ramdisks)
        if step is None or (self.backed_up is not None and step <= self.backed_up):
            return None
        folder = self.root / time.strftime(TIME_DIR_FORMAT, time.gmtime(now))
        folder.mkdir(parents=True, exist_ok=True)
        for node, ramdisk in sorted(ramdisks.items()):
            name = meta_name(self.job, step, node)
            data = f"D{hashlib.sha256(name.encode()).hexdigest()[:16]}.data"
            shutil.rmtree(folder / data, ignore_errors=True)
            shutil.copytree(ramdisk / str(step), folder / data)
            tmp = folder / f".{name}.tmp"
            tmp.write_text(json.dumps({"data": data, "step": step, "node": node}))
            os.replace(tmp, folder / name)  # the .meta last: it only ever names a whole copy
        self.backed_up, self.last_backup_at = step, now
        print(f"replicator {self.job}: Successful: backup for step {step} ({len(ramdisks)} nodes) in {folder}",
              flush=True)
        return step

    def restore(self, ramdisks: Mapping[int, Path]) -> tuple[int | None, str]:
        """Before the pods start: every ramdisk holds the same newest step (peers', else the newest complete
        backup), and nothing newer. (step or None, where it came from)."""
        peers = self._common_step(ramdisks)
        backups = complete_backups(self.root, self.job, ramdisks)
        backup = max(backups) if backups else None
        if peers is not None and (backup is None or peers >= backup):
            step, source = peers, "peers"
        elif backup is not None:
            step, source = backup, "backup"
            for node, ramdisk in ramdisks.items():
                if not (ramdisk / str(step)).is_dir():
                    ramdisk.mkdir(mode=0o700, parents=True, exist_ok=True)
                    shutil.copytree(backups[step][node], ramdisk / f".{step}.restoring", dirs_exist_ok=True)
                    os.replace(ramdisk / f".{step}.restoring", ramdisk / str(step))
        else:
            step, source = None, "nothing"
        for ramdisk in ramdisks.values():
            for newer in local_steps(ramdisk):
                if step is None or newer > step:
                    shutil.rmtree(ramdisk / str(newer), ignore_errors=True)
        if backup is not None and (self.backed_up is None or backup > self.backed_up):
            self.backed_up = backup  # a supervisor that started again knows what is already in the bucket
        print(f"replicator {self.job}: restore to step {step} from {source}", flush=True)
        return step, source

    @staticmethod
    def _common_step(ramdisks: Mapping[int, Path]) -> int | None:
        common: set[int] | None = None
        for ramdisk in ramdisks.values():
            steps = local_steps(ramdisk)
            common = steps if common is None else common & steps
        return max(common) if common else None


def flag_values(argv: Sequence[str]) -> dict[str, str]:
    """`key=value` arguments of a workload command (MaxText's style)."""
    return dict(part.split("=", 1) for part in argv if "=" in part and not part.startswith("-"))


def from_argv(argv: Sequence[str]) -> Replicator | None:
    """The replicator of a pod whose command turns multi-tier mode on, or None (no replicator in other modes);
    SpecError naming the flag when the command cannot have one (the JobSet is refused before anything starts)."""
    flags = flag_values(argv)
    if flags.get("enable_multi_tier_checkpointing") not in ("True", "true", "1"):
        return None
    run_name, base = flags.get("run_name", ""), flags.get("base_output_directory", "")
    root = replicator_backup_dir(SimpleNamespace(enable_multi_tier_checkpointing=True, run_name=run_name,
                                                 base_output_directory=base))
    require(bool(run_name), "run_name", run_name, "a run name in multi-tier mode (the replicator's job name)")
    require(base.startswith("/"), "base_output_directory", base,
            "a local path in multi-tier mode on the local target (the replicator backs up to its bucket folder)")
    steps = int(flags.get("multi_tier_checkpointing_backup_interval_steps") or 0) or None
    minutes = int(flags.get("multi_tier_checkpointing_backup_interval_minutes") or 0) or None
    return Replicator(run_name, Path(root), interval_steps=steps,
                      interval_seconds=None if minutes is None else minutes * 60.0)
