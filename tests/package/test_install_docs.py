"""docs/deployment.md's install sections say what pyproject.toml requires: the bounds table is pyproject's, and each
Cloud Composer 3 build's verdict follows from its preinstalled versions (as Google's package list gives them,
https://docs.cloud.google.com/composer/docs/versions-packages) and those bounds. Raising a bound without revisiting
the page fails here."""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from tests.conftest import REPO

PAGE = (REPO / "docs" / "deployment.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
BOUNDED = {"apache-airflow": "Airflow", "apache-airflow-providers-cncf-kubernetes": "cncf.kubernetes",
           "apache-airflow-providers-google": "google"}
NOT_SHOWN = "not in the copy read"


def declared(name: str) -> SpecifierSet:
    (req,) = [Requirement(r) for r in PYPROJECT["project"]["dependencies"] if Requirement(r).name == name]
    return req.specifier


def table(heading: str, first_column: str) -> list[dict[str, str]]:
    """The first Markdown table under `heading` whose first column is `first_column`, as dicts."""
    section = PAGE[PAGE.index(heading):]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_column} |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")))))
    return rows


def test_the_bounds_table_is_pyprojects():
    rows = {row["Package"].strip("`"): row["Needs"] for row in table("## Install", "Package") if "`" in row["Package"]}
    for name in BOUNDED:
        on_page = SpecifierSet(rows[name].replace(" ", ""))
        assert on_page == declared(name), f"{name}: the page says {rows[name]}, pyproject.toml {declared(name)}"


COMPOSER = table("## Cloud Composer 3", "Composer 3 build")


@pytest.mark.parametrize("row", COMPOSER, ids=[row["Composer 3 build"] for row in COMPOSER])
def test_each_composer_build_verdict_follows_from_its_versions_and_the_bounds(row: dict[str, str]):
    known = {name: row[column] for name, column in BOUNDED.items() if row[column] != NOT_SHOWN}
    # The build's name carries its Airflow version (composer-3-airflow-X.Y.Z-build.N).
    assert known["apache-airflow"].split("+")[0] == re.search(r"airflow-([\d.]+)-build", row["Composer 3 build"])[1]
    failing = sorted(BOUNDED[name] for name, version in known.items() if not declared(name).contains(version))
    verdict = row["Within the bounds"]
    if failing:
        assert verdict.startswith("no"), (row, failing)
        assert all(package in verdict for package in failing), (verdict, failing)
    else:
        assert verdict.startswith("yes for"), row
        said_yes = verdict.split(";")[0]
        assert all(BOUNDED[name] in said_yes for name in known), (verdict, known)
        unknown = [column for name, column in BOUNDED.items() if name not in known]
        assert all(column in verdict.split(";", 1)[1] for column in unknown) or "both providers" in verdict, verdict


def test_a_composer_build_meeting_the_airflow_bound_is_named():
    """The page says plainly which builds can take the provider; at least one listed build has Airflow >= 3.3."""
    meeting = [row for row in COMPOSER if declared("apache-airflow").contains(row["Airflow"])]
    assert meeting, "no listed Composer 3 build has an Airflow the provider accepts: say so on the page"
    assert "composer-3-airflow-3.3.1-build.0" in {row["Composer 3 build"] for row in meeting}
