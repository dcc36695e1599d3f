"""The light workload's coordinator: a folder every process of one start of the pods sees,
`<base_output_directory>/<run_name>/.sync/<start>/`, where `<start>` names the JobSet, its restart attempt and the
coordinator address (a new one at every start), so a start never reads an earlier start's posts.

Each process posts `start-<id>.json` (its OS process, the steps in its ramdisk) when it starts and `sync-<id>.json`
(the step it had reached) when it takes part in a preemption sync. The rules over these posts are in
`workload.agreement`. A peer that can no longer post is one whose process is gone or stopped: on one machine that is
read from the process table (psutil), as a peer's closed connection tells a JAX process at once.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Callable, Mapping

import psutil

from mtc_provider.core.basics.vocabulary import ENV_JOBSET_NAME, ENV_JOBSET_RESTART_ATTEMPT
from mtc_local.workload.identity import Identity

POLL_S = 0.02


def start_key(ident: Identity, environ: Mapping[str, str] = os.environ) -> str:
    raw = (f"{environ.get(ENV_JOBSET_NAME) or 'job'}-r{environ.get(ENV_JOBSET_RESTART_ATTEMPT) or 0}-"
           f"{ident.coordinator_address}")
    return re.sub(r"[^A-Za-z0-9._-]", "_", raw)


class SyncFolder:
    def __init__(self, run_directory: str | Path, ident: Identity, beat: Callable[[], None] = lambda: None):
        self.folder = Path(run_directory) / ".sync" / start_key(ident)
        self.ident = ident
        self.beat = beat  # called while waiting: waiting is not a hang

    # ---- posts -------------------------------------------------------------------------------------
    def _write(self, name: str, payload: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(payload))
        os.replace(tmp, self.folder / name)  # a reader sees a whole post or none

    def _read(self, prefix: str) -> dict[int, dict]:
        posts = {}
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return {}
        for name in names:
            found = re.fullmatch(rf"{prefix}-(\d+)\.json", name)
            if found:
                try:
                    posts[int(found[1])] = json.loads((self.folder / name).read_text())
                except (OSError, ValueError):
                    continue
        return posts

    def post_start(self, local_steps: list[int]) -> None:
        """Post this process's start (a replacement pod's process replaces the post of the one it replaces)."""
        (self.folder / f"sync-{self.ident.process_id}.json").unlink(missing_ok=True)
        me = psutil.Process()
        self._write(f"start-{self.ident.process_id}.json",
                    {"pid": me.pid, "create_time": me.create_time(), "local": local_steps})

    def wait_for_starts(self, timeout_s: float) -> dict[int, list[int]] | None:
        """Every process's local steps once all have started (None after `timeout_s`: a peer never came, as
        `jax.distributed.initialize` gives up)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            starts = self._read("start")
            if set(starts) >= set(range(self.ident.num_processes)):
                return {pid: list(post.get("local", [])) for pid, post in starts.items()}
            self.beat()
            time.sleep(POLL_S)
        return None

    def sync_under_way(self) -> bool:
        """Whether some process has taken part in a preemption sync (a notice reached one of the job's hosts)."""
        try:
            return any(name.startswith("sync-") for name in os.listdir(self.folder))
        except FileNotFoundError:
            return False

    def take_part(self, step: int, noticed: bool, timeout_s: float) -> dict[int, int] | None:
        """Post this process's step and wait until every process has posted: their steps, or None when a peer that
        has not posted is gone or stopped, or after `timeout_s` (the peers then never save together)."""
        self._write(f"sync-{self.ident.process_id}.json", {"step": step, "noticed": noticed})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            posted = {pid: int(post["step"]) for pid, post in self._read("sync").items()}
            missing = set(range(self.ident.num_processes)) - set(posted)
            if not missing:
                return posted
            if not all(self._running(pid) for pid in missing):
                return None
            self.beat()
            time.sleep(POLL_S)
        return None

    def _running(self, process_id: int) -> bool:
        post = self._read("start").get(process_id)
        if post is None:
            return False  # never started: it cannot take part
        try:
            proc = psutil.Process(post["pid"])
            if abs(proc.create_time() - post["create_time"]) > 0.01:
                return False  # the id went to another process
            return proc.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD, psutil.STATUS_STOPPED)
        except psutil.Error:
            return False
