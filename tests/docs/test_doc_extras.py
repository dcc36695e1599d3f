"""The extras the docs name exist, and the docs' image tables say what the Dockerfile installs (fast: text only).

Every `pip install ...[x,y]` line of README.md and docs/**.md (the same lines tests/docs/test_install_lines.py runs)
and every "the `x` extra" in their prose names an extra of pyproject.toml's `[project.optional-dependencies]`;
docs/deployment.md's tables give each Dockerfile target the extras its `uv export --extra ...` pins.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests.docs.test_install_lines import DOCS, REPO, install_lines

DEPLOYMENT = REPO / "docs" / "deployment.md"


def extras() -> set[str]:
    return set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def named_extras() -> dict[str, str]:
    """Each extra the docs name -> where (file:line): in an install line's brackets, or as "`x` extra" in prose."""
    found: dict[str, str] = {}
    for command, where in install_lines().items():
        for bracket in re.findall(r"\[([\w,\s-]+)\]", command):
            for name in bracket.split(","):
                found.setdefault(name.strip(), where)
    for doc in DOCS:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for name in re.findall(r"`([\w-]+)` extras?\b", line):
                found.setdefault(name, f"{doc.relative_to(REPO)}:{number}")
    return found


def dockerfile_extras() -> dict[str, set[str]]:
    """Image target -> the extras its pins are exported with (`uv export ... --extra X ... requirements-<target>`)."""
    text = (REPO / "Dockerfile").read_text()
    out = {}
    for line in text.splitlines():
        match = re.search(r"uv export .*--output-file \S*requirements-(\w+)\.txt", line)
        if match:
            out[match.group(1)] = set(re.findall(r"--extra (\w+)", line))
    return out


def table_extras(first_cell: str) -> set[str]:
    """The Extras cell of the docs/deployment.md table row whose first cell is `first_cell`."""
    for line in DEPLOYMENT.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == first_cell:
            column = 1 if cells[0].startswith("`") else 2  # the images table: Target | Extras; else Where | How | Extras
            return set(re.findall(r"`([\w-]+)`", cells[column].split("(")[0]))
    raise AssertionError(f"docs/deployment.md has no table row {first_cell!r}")


def test_every_extra_the_docs_name_exists():
    unknown = {name: where for name, where in named_extras().items() if name not in extras()}
    assert not unknown, f"extras named in the docs but not in pyproject.toml {sorted(extras())}: {unknown}"


def test_the_docs_image_tables_agree_with_the_dockerfile():
    built = dockerfile_extras()
    assert set(built) == {"gke", "local"}, built
    assert table_extras("`gke`") == built["gke"]
    assert table_extras("`local` (the default)") == built["local"]
    assert table_extras("The official Helm chart") == built["gke"]
    assert table_extras("docker-compose") == built["local"]
    assert built["local"] - built["gke"] == {"local"}


def test_the_checks_read_what_they_check():
    """The readers above find something to check (a moved table or renamed file would make them vacuous)."""
    assert {"chart", "goodput", "local"} <= set(named_extras())
    assert Path(DEPLOYMENT).is_file() and dockerfile_extras()["gke"] >= {"chart", "deploy"}
