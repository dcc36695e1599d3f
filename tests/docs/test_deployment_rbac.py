"""docs/deployment.md's Role and its table grant exactly what the launch operator's identity uses (issue 32 (e):
the trigger lists the pods' events for FailedMount), one source of truth: core.definition.cluster.readiness.RBAC_NEEDS, which the
readiness check asks the API server about."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from mtc_provider.core.definition.cluster.readiness import RBAC_NEEDS

DOC = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"


def _section() -> str:
    text = DOC.read_text()
    start = text.index("## RBAC in the JobSet's namespace")
    return text[start:text.index("\n## ", start + 1)]


def _needed() -> dict[tuple[str, str], set[str]]:
    return {(group, resource): set(verbs) for group, resource, verbs, _ in RBAC_NEEDS}


def test_the_role_yaml_grants_every_needed_verb_and_no_other():
    block = re.search(r"```yaml\n(.*?)```", _section(), re.S).group(1)
    (role,) = [doc for doc in yaml.safe_load_all(block) if doc["kind"] == "Role"]
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    assert granted == _needed()
    assert granted[("", "events")] == {"list", "watch"}


def test_the_table_lists_every_needed_verb():
    rows = {}
    for line in _section().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1].startswith("`") and cells[0] != "API group":
            group = cells[0].split("`")[1].strip('"')
            rows[(group, cells[1].strip("`"))] = {v.strip() for v in cells[2].split(",")}
    assert rows == _needed()
