"""What the chaos test drives and watches: `airflow dags test` in its own process group, and an observer thread
that hashes every committed persistent checkpoint when it first appears and records every JobSet it sees."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtc_provider.core.basics.labels import ATTEMPT
from mtc_provider.adapters.workload_events import read_events

STEP_DIR = re.compile(r"^\d+$")
COMMIT_FILE = "commit_success.txt"


def airflow_command(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "airflow"), *args]


def start_airflow(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start the airflow CLI in a new session, so SIGKILL reaches it and every child it made (not the runner's
    supervisor, which starts its own session on purpose: JobSets outlive the task)."""
    with log.open("ab") as out:
        return subprocess.Popen(airflow_command(*args), env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def start_airflow_script(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Run a Python script with the Airflow environment, like start_airflow."""
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)


def hash_step(step_dir: Path) -> dict[str, str]:
    """sha256 of every file under a step directory, by relative path."""
    out = {}
    for path in sorted(p for p in step_dir.rglob("*") if p.is_file()):
        out[str(path.relative_to(step_dir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def committed_steps(checkpoint_dir: Path) -> list[int]:
    if not checkpoint_dir.is_dir():
        return []
    return sorted(int(p.name) for p in checkpoint_dir.iterdir()
                  if STEP_DIR.match(p.name) and (p / COMMIT_FILE).exists())


@dataclass
class Observer:
    """Polls, in a thread, the persistent checkpoint directory, the runner's JobSet state files and the
    workload's events (newest step), until stopped."""

    checkpoint_dir: Path
    state_dir: Path  # <runner home>/state/<namespace>
    events_dir: Path
    interval: float = 0.3
    hashes: dict[int, dict[str, str]] = field(default_factory=dict)  # step -> {file: sha256}, first sight
    jobsets: dict[str, set[str]] = field(default_factory=dict)  # JobSet name -> uids seen
    try_labels: dict[str, str] = field(default_factory=dict)  # JobSet name -> attempt label (the name's number)
    newest_step: int = 0
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-observer", daemon=True)

    def start(self) -> "Observer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.poll()  # a last look, so nothing committed at the very end is missed

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as err:  # keep watching; the test reports what went wrong
                self.errors.append(repr(err))
            self._stop.wait(self.interval)

    def poll(self) -> None:
        for step in committed_steps(self.checkpoint_dir):
            if step not in self.hashes:
                self.hashes[step] = hash_step(self.checkpoint_dir / str(step))
        if self.state_dir.is_dir():
            for path in self.state_dir.glob("*.json"):
                if path.name.endswith(".pods.json"):
                    continue
                try:
                    meta = json.loads(path.read_text())["metadata"]
                except (FileNotFoundError, ValueError, KeyError):
                    continue  # deleted or replaced between listing and reading
                self.jobsets.setdefault(meta["name"], set()).add(meta["uid"])
                self.try_labels[meta["name"]] = (meta.get("labels") or {}).get(ATTEMPT, "")
        steps = [e["step"] for e in read_events(self.events_dir) if e.get("event") == "step"]
        if steps:
            self.newest_step = max(self.newest_step, max(steps))

    def wait_for_step(self, step: int, timeout: float, alive: subprocess.Popen[bytes] | None = None) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.newest_step >= step:
                return True
            if alive is not None and alive.poll() is not None:
                return False
            time.sleep(0.2)
        return False
