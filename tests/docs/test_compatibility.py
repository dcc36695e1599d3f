"""The compatibility matrix names the versions the tests really use: pyproject's lower bounds (the lowest-direct
job installs exactly those) and the versions installed from the lock."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version

import pytest

from tests.conftest import REPO

PAGE = (REPO / "docs" / "compatibility.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
ROWS = {line.split("|")[1].strip(): line for line in PAGE.splitlines() if line.startswith("| ") and "---" not in line}
CHECKED = ("apache-airflow", "apache-airflow-providers-google", "apache-airflow-providers-cncf-kubernetes",
           "google-cloud-storage", "google-cloud-container", "google-cloud-resource-manager")


def lower_bound(name: str) -> str:
    requirements = PYPROJECT["project"]["dependencies"] + PYPROJECT["project"]["optional-dependencies"]["chart"]
    (spec,) = [r for r in requirements if re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0] == name]
    return re.search(r">=\s*([\w.]+)", spec).group(1)


@pytest.mark.parametrize("name", CHECKED + ("matplotlib (`chart`, `local` extras)",))
def test_lowest_column_is_the_declared_lower_bound(name: str) -> None:
    package = name.split(" ")[0]
    lowest = ROWS[name].split("|")[2].strip()
    declared = lower_bound(package)
    assert lowest.startswith(declared), f"{package}: the table says {lowest}, pyproject.toml declares >={declared}"


@pytest.mark.parametrize("name", CHECKED)
def test_the_installed_version_is_in_the_table(name: str) -> None:
    """`make test` runs on the newest column, `make test-lowest` on the lowest one."""
    lowest, newest = (ROWS[name].split("|")[i].strip() for i in (2, 3))
    assert version(name) in (lowest, newest)
