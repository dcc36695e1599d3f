"""Build (once) a Python 3.12 environment holding a real MaxText release, for the conformance tests.

    .venv/bin/python scripts/maxtext_env.py            # MaxText 0.2.5; prints the environment's python
    .venv/bin/python scripts/maxtext_env.py --version 0.2.5

MaxText needs Python >= 3.12, the project's own environment may be older, so the release lives in its own
environment under .cache/maxtext-<version> (outside git), installed with `uv pip install --no-deps` from the
pinned list scripts/maxtext-env/<version>.txt: the package without its extras plus only what its config
loader imports (~670 MB, about a minute with a cold cache). A second call returns at once: a stamp holding the
list's hash says the environment is complete. The interpreter is CPython 3.12 from $MTC_PYTHON312, pyenv
(~/.pyenv or /root/.pyenv) or `python3.12` on PATH; no Python is downloaded. Any failure raises
EnvironmentBuildError with the command and its output, so a test can fail with a clear message.
"""

from __future__ import annotations

import argparse
import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO / "scripts" / "maxtext-env"
DEFAULT_VERSION = "0.2.5"
BUILD_TIMEOUT_S = 1200


class EnvironmentBuildError(RuntimeError):
    """The MaxText environment could not be built; the message says which step failed and why."""


def cache_dir() -> Path:
    return Path(os.environ.get("MTC_CACHE_DIR", REPO / ".cache"))


def find_python312() -> str:
    candidates = [os.environ.get("MTC_PYTHON312", "")]
    for home in (Path.home() / ".pyenv", Path("/root/.pyenv")):
        candidates += sorted(glob.glob(str(home / "versions" / "3.12.*" / "bin" / "python")), reverse=True)
    candidates.append(shutil.which("python3.12") or "")
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise EnvironmentBuildError(
        "no CPython 3.12 found (MaxText needs Python >= 3.12): set MTC_PYTHON312, install it under pyenv, "
        "or put python3.12 on PATH")


def find_uv() -> str:
    for candidate in (os.environ.get("MTC_UV", ""), str(REPO / ".tools" / "bin" / "uv"), shutil.which("uv") or ""):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise EnvironmentBuildError("uv not found: run `make venv` first (it installs .tools/bin/uv)")


def _run(command: list[str]) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise EnvironmentBuildError(f"timed out after {BUILD_TIMEOUT_S} s: {' '.join(command)}") from exc
    if done.returncode != 0:
        raise EnvironmentBuildError(
            f"failed ({done.returncode}): {' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def ensure_env(version: str = DEFAULT_VERSION) -> Path:
    """The python of a complete environment with MaxText `version`; builds it when missing or stale."""
    requirements = REQUIREMENTS / f"{version}.txt"
    if not requirements.is_file():
        known = sorted(p.stem for p in REQUIREMENTS.glob("*.txt"))
        raise EnvironmentBuildError(f"no pinned list for MaxText {version}; known: {', '.join(known)}")
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()
    env = cache_dir() / f"maxtext-{version}"
    python = env / "bin" / "python"
    stamp = env / ".complete"
    if stamp.is_file() and stamp.read_text() == digest and python.exists():
        return python
    env.parent.mkdir(parents=True, exist_ok=True)
    with open(env.parent / f".maxtext-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test sessions build it once
        if stamp.is_file() and stamp.read_text() == digest and python.exists():
            return python
        shutil.rmtree(env, ignore_errors=True)
        uv = find_uv()
        _run([uv, "venv", "--quiet", "-p", find_python312(), str(env)])
        _run([uv, "pip", "install", "--quiet", "--no-deps", "-p", str(python), "-r", str(requirements)])
        stamp.write_text(digest)
    return python


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=DEFAULT_VERSION)
    args = parser.parse_args()
    try:
        print(ensure_env(args.version))
    except EnvironmentBuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
