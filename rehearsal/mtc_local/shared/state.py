"""Where the runner keeps things, and atomic JSON files.

One home directory holds everything a new process needs to find a JobSet again:
  <home>/state/<namespace>/<name>.json        the JobSet object (only the supervisor writes it)
  <home>/state/<namespace>/<name>.pods.json   the pods of the current attempt (pid, exit code, log)
  <home>/logs/<namespace>/<name>/<restart>/s<slice>-h<host>.log
  <home>/faults/<namespace>/<name>.jsonl      one line per injected fault
  <home>/supervisor.json                      {pid, host, api_port, home} of the live supervisor
  <home>/kubeconfig, <home>/pki/              how clients reach its API server (local/cluster)
The ramdisks live on tmpfs under /dev/shm/mtc-<uid>-<hash of home>/<namespace>/<name>/s<slice>-h<host>/ (ramdisk.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHM_ROOT = Path(os.environ.get("MTC_RUNNER_SHM_ROOT", "/dev/shm"))


def write_json(path: Path, data: Any) -> None:
    """Write JSON so readers see the old file or the new one, never half of one (tmp + os.replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> Any | None:
    """The file's JSON, or None when it does not exist."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


@dataclass(frozen=True)
class Home:
    """The runner's directory layout for one home."""

    root: Path

    @classmethod
    def of(cls, home: str | os.PathLike[str]) -> Home:
        return cls(Path(home).expanduser().resolve())

    @property
    def supervisor_file(self) -> Path:
        return self.root / "supervisor.json"

    @property
    def lock_file(self) -> Path:
        return self.root / "supervisor.lock"

    @property
    def supervisor_log(self) -> Path:
        return self.root / "supervisor.log"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def delete_audit_file(self) -> Path:
        """Every DELETE the API server answered: time, path, status code, caller and reason (JSON lines)."""
        return self.state_dir / "deletes.jsonl"

    def jobset_file(self, namespace: str, name: str) -> Path:
        return self.state_dir / namespace / f"{name}.json"

    def pods_file(self, namespace: str, name: str) -> Path:
        return self.state_dir / namespace / f"{name}.pods.json"

    def log_dir(self, namespace: str, name: str) -> Path:
        return self.root / "logs" / namespace / name

    def faults_file(self, namespace: str, name: str) -> Path:
        return self.root / "faults" / namespace / f"{name}.jsonl"

    @property
    def shm_root(self) -> Path:
        # One tmpfs tree per user and home, so two homes (two test runs) never share a ramdisk. The name can be
        # guessed: ramdisk.ensure_private_root makes it this user's (0700) or refuses it.
        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:12]
        return SHM_ROOT / f"mtc-{os.getuid()}-{digest}"

    def ramdisk_dir(self, namespace: str, name: str, slice_index: int, host: int) -> Path:
        return self.shm_root / namespace / name / f"s{slice_index}-h{host}"

    def jobset_files(self) -> list[Path]:
        """Every stored JobSet object (not the pods files)."""
        if not self.state_dir.exists():
            return []
        return sorted(p for p in self.state_dir.glob("*/*.json") if not p.name.endswith(".pods.json"))
