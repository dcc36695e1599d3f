"""The install line a message gives for a missing extra is one the docs give too, so the docs' install-line test
(tests/docs/test_install_lines.py, which runs them from a fresh virtual environment) covers what users are told.
`pip install 'airflow-provider-mtc[...]'` would fail for every user: the provider is on no package index."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtc_provider.adapters.library_goodput import INSTALL_HINT
from mtc_provider.core.basics.install import install_line
from mtc_provider.targets.registry import INSTALL

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_local_extra_needs_the_mtc_local_wheel_beside_the_provider():
    assert install_line("local") == 'pip install "$(ls dist/airflow_provider_mtc-*.whl)[local]" dist/local/mtc_local-*.whl'
    assert install_line("goodput") == 'pip install "$(ls dist/airflow_provider_mtc-*.whl)[goodput]"'


@pytest.mark.parametrize("extra", ["local", "goodput", "chart"])
def test_each_hint_is_an_install_line_of_the_docs(extra):
    docs = "\n".join(p.read_text() for p in DOCS.rglob("*.md"))
    assert install_line(extra) in docs, f"docs give no `{install_line(extra)}`"


def test_no_message_names_a_package_index_install():
    assert "airflow-provider-mtc[" not in INSTALL_HINT + INSTALL
    assert install_line("goodput") in INSTALL_HINT
