"""The third-party test data is what its README says it is, and the guide's facts table agrees with the code."""

from __future__ import annotations

import dataclasses
import hashlib
import re

import pytest

from mtc_provider.core.definition.description.spec import CheckpointingSpec
from tests.conftest import THIRD_PARTY, THIRD_PARTY_DIRS, reference_file
from tests.data.guide_facts import MAXTEXT_FLAGS

ROW_RE = re.compile(r"^\| `([^`]+)` \|.*\| `([0-9a-f]{64})` \|$", flags=re.M)


def readme_rows() -> dict[str, str]:
    return dict(ROW_RE.findall((THIRD_PARTY / "README.md").read_text(encoding="utf-8")))


def test_every_file_is_listed_with_its_source():
    files = {p.name for folder in THIRD_PARTY_DIRS for p in folder.iterdir() if p.suffix == ".yaml"}
    assert files == set(readme_rows()), "every third-party file needs a README row (repository, tag, licence)"


@pytest.mark.parametrize("name", sorted(readme_rows()))
def test_file_is_the_upstream_copy(name):
    assert hashlib.sha256(reference_file(name).read_bytes()).hexdigest() == readme_rows()[name]


def test_checkpointing_defaults_are_the_guides():
    defaults = {f.name: f.default for f in dataclasses.fields(CheckpointingSpec) if f.name in MAXTEXT_FLAGS}
    assert defaults == {name: default for name, (_, default) in MAXTEXT_FLAGS.items()}
