"""Which files on this machine the run view may serve: only those under the roots the deployment configures.

The run view's file routes take their paths from XComs (the launch task's `checkpoint_dir`, the goodput task's
`chart_path`), and XComs are written by task code and by any user the auth manager lets write them. So a path is
served only when, with every symbolic link resolved, it lies under one of `[mtc] run_view_file_roots` (also
resolved): by default the local home's bucket folder (`<local home>/buckets`, where the local target keeps its runs'
checkpoints, events and goodput charts). Anything else is answered as absent (404), never as forbidden, so that a
probe learns nothing about the machine's files.
"""

from __future__ import annotations

import os
from pathlib import Path

SECTION, OPTION = "mtc", "run_view_file_roots"


def configured_roots() -> list[Path]:
    """`[mtc] run_view_file_roots` (paths separated by commas), else `<local home>/buckets`, each resolved."""
    from airflow.configuration import conf

    from mtc_provider.target import default_local_home

    raw = conf.get(SECTION, OPTION, fallback="") or ""
    roots = [part.strip() for part in raw.split(",") if part.strip()]
    if not roots:
        roots = [os.path.join(default_local_home(), "buckets")]
    # resolve(): a root that is itself a symlink names the folder it points at; a relative root would depend on the
    # api-server's working directory, so it is ignored.
    return [Path(root).expanduser().resolve() for root in roots if Path(root).expanduser().is_absolute()]


def allowed(path: str | os.PathLike | None, roots: list[Path] | None = None) -> Path | None:
    """`path` resolved (symlinks followed), when it lies under one of the roots; else None."""
    if not path:
        return None
    try:
        resolved = Path(path).resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte: not a file this view serves
        return None
    for root in configured_roots() if roots is None else roots:
        if resolved == root or root in resolved.parents:
            return resolved
    return None
