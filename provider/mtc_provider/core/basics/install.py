"""The line that installs one of the provider's extras, for messages that name a missing one.

The provider is on no package index: its wheel comes from `make dist` (docs/deployment.md), and the `local` extra
also needs the mtc-local wheel beside it (`pip install 'airflow-provider-mtc[...]'` fails for every user). The
docs give the same lines, and tests/docs/test_install_lines.py runs them from a fresh virtual environment.
"""

from __future__ import annotations

WHEEL = '"$(ls dist/airflow_provider_mtc-*.whl)[{extra}]"'
LOCAL_WHEEL = "dist/local/mtc_local-*.whl"


def install_line(extra: str) -> str:
    """`pip install` of the provider's wheel with `extra` (after `make dist`), with mtc-local's wheel for `local`."""
    line = f"pip install {WHEEL.format(extra=extra)}"
    return f"{line} {LOCAL_WHEEL}" if extra == "local" else line
