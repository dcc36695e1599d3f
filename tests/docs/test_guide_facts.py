"""tests/data/guide_facts.py says what the guide says: compared with the guide where it is present.

The guide is prose and stays out of the project; where it is not beside the checkout these tests skip with that
reason. The facts table itself is checked against the code everywhere (tests/core/test_third_party_data.py).
"""

from __future__ import annotations

import re

from tests.conftest import guide_file
from tests.data.guide_facts import GCLOUD_CALLS, GCLUSTER_FLAGS, GUIDE_FILE, MAXTEXT_FLAGS

GCLOUD_RE = re.compile(r"\bgcloud\s")
FLAG_ROW_RE = re.compile(r"^`([a-z_]+)`\t.*\t`(boolean|string|integer)`\t`([^`]*)`", flags=re.M)


def guide_text() -> str:
    return guide_file(GUIDE_FILE).read_text(encoding="utf-8")


def gcloud_calls(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """Each gcloud call of the guide as (command words, flags), continuation lines joined."""
    calls = []
    for line in text.replace("\\\n", " ").splitlines():
        match = GCLOUD_RE.search(line)
        if not match or "gcloud job submit" in line:
            continue
        words = []
        for token in line[match.start():].split():
            if token.startswith("-") or "$" in token or "://" in token or not re.fullmatch(r"[a-z][a-z/-]*", token):
                break
            words.append(token)
        flags = tuple(re.findall(r"(?<!\S)(--[a-z][a-z-]*)", line[match.start():]))
        if len(words) >= 3:  # "gcloud" + group + verb at least; prose mentioning gcloud is skipped
            calls.append((" ".join(words), flags))
    return calls


def maxtext_flags(text: str) -> dict[str, tuple[str, object]]:
    parse = {"boolean": lambda v: v == "True", "integer": int, "string": lambda v: v.strip('"')}
    return {name: (kind, parse[kind](default)) for name, kind, default in FLAG_ROW_RE.findall(text)}


def test_gcloud_calls_match_the_guide():
    assert gcloud_calls(guide_text()) == list(GCLOUD_CALLS)


def test_maxtext_flags_and_defaults_match_the_guide():
    assert maxtext_flags(guide_text()) == MAXTEXT_FLAGS


def test_gcluster_flags_are_the_guides():
    text = guide_text()
    assert all(f"`{flag}`" in text for flag in GCLUSTER_FLAGS)
