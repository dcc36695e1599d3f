"""Every install line the docs give is run, from a fresh virtual environment (issue 35 item 10).

The quickstart told GKE users to `pip install ".[local]"`, which fails (mtc-local is on no index) and is not needed
for GKE. Here each `pip install ...` in README.md and docs/**.md (in a code block or an inline code span) runs as
written, with `pip install` replaced by `uv pip install --offline` into a new `uv venv` (offline: from the uv cache
that `make venv` filled; when the cache lacks an index page, e.g. for an extra `make venv` installed from the lock's
URLs, the same line asks the index), in a folder holding what `make dist` builds (`dist/` and
`dist/local/`). Each must succeed and leave `mtc_provider` importable, with its extras' packages where it names
them. A line that is not meant to run is listed in NOT_RUN with why; an entry the docs no longer have fails too.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
# Lines the docs show on purpose that are not installs of this provider from dist/.
NOT_RUN = {
    "pip install airflow-provider-mtc": "deployment.md says it finds nothing: the provider is not on PyPI",
    "pip install -r <pins> <wheel>": "a placeholder describing the Dockerfile (its commands: tests/deploy/test_compose.py)",
    "pip install keyring keyrings.google-artifactregistry-auth": "the publisher's twine tooling, not the provider",
    "uv pip install --no-deps maxtext==X": "a placeholder for how docs/maxtext.md's table was measured",
}
IMPORTS = {"[local]": ["mtc_local", "jax"], "[goodput]": ["ml_goodput_measurement"]}


def install_lines() -> dict[str, str]:
    """Each distinct `pip install` command of the docs -> where it is (file:line)."""
    found: dict[str, str] = {}
    for doc in DOCS:
        in_block = False
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                in_block = not in_block
                continue
            if in_block:
                candidates = [line.split(" #")[0].strip()]
            else:
                candidates = re.findall(r"`([^`]*pip install[^`]*)`", line)
            for command in candidates:
                command = command.strip()
                if re.match(r"^(uv )?pip install\s+\S", command):  # a command, not prose naming it
                    found.setdefault(command, f"{doc.relative_to(REPO)}:{number}")
    return found


def test_not_run_entries_are_still_in_the_docs():
    assert set(NOT_RUN) <= set(install_lines()), set(NOT_RUN) - set(install_lines())


def test_no_install_line_names_the_provider_on_an_index():
    """`pip install 'airflow-provider-mtc[...]'` or `".[local]"` never work for a user: not on PyPI, mtc-local on
    no index."""
    wrong = {c: at for c, at in install_lines().items()
             if re.search(r"airflow-provider-mtc\[|\"\.\[|'\.\[|\s\.\[", c)}
    assert not wrong, wrong


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A folder with `dist/` and `dist/local/` as `make dist` leaves them (the wheels only)."""
    root = tmp_path_factory.mktemp("install")
    uv = shutil.which("uv", path=str(REPO / ".tools" / "bin")) or "uv"
    for args in ([], ["--package", "mtc-local"]):
        out = root / "dist" / ("local" if args else "")
        subprocess.run([uv, "build", "--wheel", *args, "--out-dir", str(out)], cwd=REPO, check=True,
                       capture_output=True, timeout=300)
    return root


@pytest.mark.parametrize("command", sorted(set(install_lines()) - set(NOT_RUN)))
def test_the_install_line_works_in_a_fresh_environment(command: str, built: Path):
    uv = shutil.which("uv", path=str(REPO / ".tools" / "bin")) or "uv"
    venv = built / f"venv-{abs(hash(command))}"
    subprocess.run([uv, "venv", "-q", "--python", "3.11", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    run = re.sub(r"^(uv )?pip install", f"{uv} pip install --offline --python {python}", command)
    done = subprocess.run(["bash", "-c", run], cwd=built, capture_output=True, text=True, timeout=900)
    if done.returncode and "network was disabled" in done.stderr:  # the cache lacks an index page: ask the index
        done = subprocess.run(["bash", "-c", run.replace(" --offline", "")], cwd=built, capture_output=True,
                              text=True, timeout=900)
    assert done.returncode == 0, f"{install_lines()[command]}: `{command}` failed:\n{done.stderr[-3000:]}"
    modules = ["mtc_provider"] + [m for extra, names in IMPORTS.items() if extra in command for m in names]
    check = subprocess.run([str(python), "-c", f"import {', '.join(modules)}"], capture_output=True, text=True,
                           timeout=300)
    assert check.returncode == 0, f"`{command}` installed, but not {modules}:\n{check.stderr[-2000:]}"
