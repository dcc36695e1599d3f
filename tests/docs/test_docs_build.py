"""The docs site: it builds in strict mode, and its reference pages stay in step with the code and the guide.

- `mkdocs build --strict` succeeds (a broken link, anchor or nav entry fails it).
- troubleshooting.md has a heading for every exception class the provider defines, and quotes the fixed part
  of every message it raises on purpose (Airflow failures, retryable attempts, resubmission decisions).
- gcloud-mapping.md has a table row for every gcloud command + flag of the guide, every MaxText flag of its
  table and both gcluster flags (the guide's facts are written in tests/data/guide_facts.py), and each of those rows names a provider class, parameter or `mtc` command.
- Every provider class or `mtc` command a page of ours names really exists.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.data.guide_facts import GCLOUD_CALLS, GCLUSTER_FLAGS, MAXTEXT_FLAGS

DOCS = REPO / "docs"
PACKAGE = REPO / "provider" / "mtc_provider"
REHEARSAL = REPO / "rehearsal" / "mtc_local"  # the mtc-local distribution: its messages are explained too
OUR_PAGES = ("quickstart.md", "gcloud-mapping.md", "troubleshooting.md", "resubmission.md", "local-target.md")

# Exception types that the provider raises on purpose whose messages must be explained.
AIRFLOW_RAISES = {"AirflowFailException", "AirflowSensorTimeout"}
EXCEPTION_ROOTS = {"Exception", "ValueError", "RuntimeError", "AirflowException", "AirflowFailException"}
MIN_FIXED_TEXT = 12  # shorter constant fragments ("JobSet ", ": ") say nothing a reader could search for


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def package_modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"))) for root in (PACKAGE, REHEARSAL)
            for path in sorted(root.rglob("*.py"))]


# --- the build ------------------------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_mkdocs_strict_build_succeeds(tmp_path):
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
         "--site-dir", str(site)],
        cwd=REPO, capture_output=True, text=True, timeout=170, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    for name in OUR_PAGES:
        built = site / name.removesuffix(".md") / "index.html"
        assert built.is_file(), f"{name} was not built (missing from the docs folder or the nav?)"


# --- troubleshooting ------------------------------------------------------------------------------


def exception_classes() -> dict[str, Path]:
    """Every class in the package that derives (directly or through another) from an exception type."""
    bases: dict[str, tuple[set[str], Path]] = {}
    for path, tree in package_modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names = {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                         if isinstance(b, (ast.Name, ast.Attribute))}
                bases[node.name] = (names, path)
    found: dict[str, Path] = {}
    changed = True
    while changed:
        changed = False
        for name, (parents, path) in bases.items():
            if name not in found and parents & (EXCEPTION_ROOTS | set(found)):
                found[name] = path
                changed = True
    return found


def test_the_exception_scan_sees_the_core_hierarchy():
    # Guards the scan itself: if it found nothing, the next test would pass vacuously.
    found = exception_classes()
    for name in ("MtcError", "SpecError", "NotReady", "ApiError", "PermissionDenied", "Retryable"):
        assert name in found, f"{name} not found by the exception scan"


def test_every_exception_class_has_a_troubleshooting_entry():
    headings = "\n".join(line for line in page("troubleshooting.md").splitlines() if line.startswith("#"))
    missing = sorted(f"{name} ({path.relative_to(REPO)})" for name, path in exception_classes().items()
                     if not re.search(rf"\b{re.escape(name)}\b", headings))
    assert not missing, f"exception classes without a heading in docs/troubleshooting.md: {missing}"


def _fixed_text(node: ast.AST) -> list[str]:
    """The constant pieces of a message expression (str, f-string, or a + of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _fixed_text(node.left) + _fixed_text(node.right)
    return []


def raised_messages() -> list[tuple[str, str]]:
    """(where, first searchable fixed fragment) of each message the provider raises on purpose."""
    ours = set(exception_classes()) - {"SpecError", "FlagError"}  # these two are structured; see their entries
    kinds = AIRFLOW_RAISES | ours
    messages = []
    for path, tree in package_modules():
        for node in ast.walk(tree):
            call = None
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                func = node.exc.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if name in kinds:
                    call = node.exc
            elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Decision" and len(node.args) == 2:
                call = ast.Call(func=node.func, args=node.args[1:], keywords=[])  # Decision(kind, reason)
            if call is None or not call.args:
                continue
            pieces = [" ".join(p.split()).strip(" :;,(") for p in _fixed_text(call.args[0])]
            pieces = [p for p in pieces if len(p) >= MIN_FIXED_TEXT]
            if pieces:
                # The opening words are what a reader searches for; the tail may be reworded freely.
                messages.append((f"{path.relative_to(REPO)}:{node.lineno}", pieces[0][:60].strip()))
    return messages


def test_the_message_scan_sees_the_resubmission_reasons():
    texts = [text for _, text in raised_messages()]
    assert any("crash loop" in text for text in texts), texts
    assert any("invalid spec" in text for text in texts), texts


def test_every_raised_message_is_explained():
    text = " ".join(page("troubleshooting.md").split()).lower()
    missing = [f"{where}: {fragment!r}" for where, fragment in raised_messages() if fragment.lower() not in text]
    assert not missing, "messages the provider raises that docs/troubleshooting.md does not quote:\n" + "\n".join(missing)


# --- the gcloud mapping ---------------------------------------------------------------------------

def guide_invocations() -> list[tuple[str, list[str]]]:
    """Each gcloud call of the guide as (command words, flags), from the table written in the project."""
    return [(command, list(flags)) for command, flags in GCLOUD_CALLS]


def guide_maxtext_flags() -> list[str]:
    return list(MAXTEXT_FLAGS)


def table_rows(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("|") and not re.match(r"^\|[\s|:-]+\|$", line)]


def provider_names() -> set[str]:
    """Public classes of the package, fields of the run description, and the `mtc` commands."""
    names: set[str] = set()
    for _, tree in package_modules():
        names |= {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and not n.name.startswith("_")}
    from mtc_provider.core.definition.description.spec import CheckpointingSpec, WorkloadSpec

    names |= {f"checkpointing.{f.name}" for f in dataclasses.fields(CheckpointingSpec)}
    names |= {f"workload.{f.name}" for f in dataclasses.fields(WorkloadSpec)}
    names |= {f"mtc {command}" for command in cli_commands()}
    return names


def cli_commands() -> set[str]:
    from mtc_provider.cli.app import app

    groups = {g.name for g in app.registered_groups}  # `mtc local up|down`
    return {(c.name or c.callback.__name__) for c in app.registered_commands} | groups


def test_the_guide_scan_finds_the_guides_commands():
    commands = {command for command, _ in guide_invocations()}
    assert {"gcloud config set project", "gcloud storage buckets create", "gcloud container node-pools create",
            "gcloud storage buckets add-iam-policy-binding", "gcloud projects describe"} <= commands, commands
    assert len(guide_maxtext_flags()) == 8, guide_maxtext_flags()


def test_every_gcloud_command_and_flag_has_a_row():
    rows = table_rows(page("gcloud-mapping.md"))
    missing = []
    for command, flags in guide_invocations():
        command_rows = [row for row in rows if f"`{command}" in row]
        if not command_rows:
            missing.append(command)
        for flag in flags:
            if not any(re.search(rf"`{re.escape(flag)}\b", row) for row in command_rows):
                missing.append(f"{command} {flag}")
    assert not missing, f"gcloud-mapping.md has no table row for: {missing}"


def test_every_maxtext_and_gcluster_flag_has_a_row():
    rows = table_rows(page("gcloud-mapping.md"))
    wanted = [f"`{flag}`" for flag in guide_maxtext_flags()] + [f"`{flag}`" for flag in GCLUSTER_FLAGS]
    missing = [flag for flag in wanted if not any(row.startswith(f"| {flag}") for row in rows)]
    assert not missing, f"gcloud-mapping.md has no row starting with: {missing}"


def test_every_mapping_row_names_what_does_it():
    names = provider_names()
    rows = [row for row in table_rows(page("gcloud-mapping.md")) if not row.startswith("| Guide")]  # headers
    assert rows
    idle = [row for row in rows if not any(f"`{name}" in row or f"{name}(" in row for name in names)]
    assert not idle, "rows that name no provider class, run-description field or mtc command:\n" + "\n".join(idle)


@pytest.mark.parametrize("name", OUR_PAGES)
def test_named_classes_and_commands_exist(name):
    text = page(name)
    names = provider_names()
    classes = set(re.findall(r"`(Mtc[A-Za-z]+|[A-Z][A-Za-z]+(?:Operator|Sensor|Trigger))\b", text))
    unknown = sorted(c for c in classes if c not in names)
    commands = set(re.findall(r"`mtc ([a-z-]+)", text))
    unknown += sorted(f"mtc {c}" for c in commands - cli_commands())
    assert not unknown, f"{name} names things the provider does not have: {unknown}"
