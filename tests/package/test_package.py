"""The distribution: `make dist` builds the sdist and wheel (the pinned uv) and passes `twine check --strict`; they
carry complete metadata and one version (`mtc_provider.__version__`, read by hatch), and the wheel installs into a
fresh environment that already has Airflow (the lock's versions), where `airflow providers list` shows the provider
and `mtc --version` runs."""

from __future__ import annotations

import ast
import email
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from mtc_provider import __version__
from mtc_provider.get_provider_info import get_provider_info
from tests.conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def uv() -> str:
    pinned = REPO / ".tools" / "bin" / "uv"  # the Makefile's pinned uv
    return str(pinned) if pinned.exists() else "uv"


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """What `make dist` builds (its own twine check included), into a temporary DIST instead of ./dist."""
    out = tmp_path_factory.mktemp("dist")
    made = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "dist", f"DIST={out}"],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    assert made.stdout.count("PASSED") == 4, made.stdout[-3000:]  # twine on both files of both distributions
    assert sorted(p.name for p in (out / "local").iterdir() if not p.name.startswith(".")) == [
        f"mtc_local-{__version__}-py3-none-any.whl", f"mtc_local-{__version__}.tar.gz"]  # the rehearsal's own folder
    return out


def wheel(dist: Path) -> Path:
    (path,) = dist.glob("airflow_provider_mtc-*.whl")
    return path


def metadata(dist: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel(dist)) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(zf.read(name))


def test_twine_check_passes(dist: Path) -> None:
    files = sorted(str(p) for p in dist.iterdir() if p.name.endswith((".whl", ".tar.gz")))
    assert len(files) == 2, files
    result = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *files], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2


def test_metadata_is_complete(dist: Path) -> None:
    meta = metadata(dist)
    assert meta["Name"] == "airflow-provider-mtc"
    assert meta["Version"] == __version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Requires-Python"] == ">=3.10"
    assert meta["Description-Content-Type"] == "text/markdown"
    assert "Framework :: Apache Airflow :: Provider" in meta.get_all("Classifier")
    assert meta["Summary"] and meta["Keywords"]
    assert set(meta.get_all("Provides-Extra")) >= {"chart", "local", "test"}


def _source_version() -> str:
    """`__version__` as written in the source file hatch reads (not the installed copy)."""
    tree = ast.parse((REPO / PYPROJECT["tool"]["hatch"]["version"]["path"]).read_text(encoding="utf-8"))
    (value,) = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__version__"]]
    return value


def test_the_version_has_one_source(dist: Path) -> None:
    """Issue 27: the version was written twice (pyproject.toml and `__version__`). Now pyproject.toml declares it
    dynamic, hatch reads `provider/mtc_provider/__init__.py`, and the wheel, the sdist, `__version__` and
    get_provider_info() say the same."""
    assert "version" not in PYPROJECT["project"] and "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["hatch"]["version"]["path"] == "provider/mtc_provider/__init__.py"
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tf:
        pkg_info = email.message_from_bytes(tf.extractfile(next(m for m in tf.getmembers()
                                                                if m.name.count("/") == 1
                                                                and m.name.endswith("/PKG-INFO"))).read())
    assert wheel(dist).name == f"airflow_provider_mtc-{_source_version()}-py3-none-any.whl"
    assert metadata(dist)["Version"] == pkg_info["Version"] == _source_version() == __version__
    assert get_provider_info()["versions"] == [__version__]


def test_matplotlib_only_with_the_extras_that_draw(dist: Path) -> None:
    requires = metadata(dist).get_all("Requires-Dist")
    for req in (r for r in requires if r.startswith("matplotlib")):
        assert re.search(r"extra == '(chart|local)'", req), req
    assert any("extra == 'chart'" in r for r in requires if r.startswith("matplotlib"))


def test_wheel_ships_the_package_and_the_provider_entry_point(dist: Path) -> None:
    with zipfile.ZipFile(wheel(dist)) as zf:
        names = zf.namelist()
        entry_points = zf.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "mtc_provider/get_provider_info.py" in names and "mtc_provider/hooks/jobset.py" in names
    assert any(n.endswith("licenses/LICENSE") for n in names)
    assert "[apache_airflow_provider]\nprovider_info = mtc_provider.get_provider_info:get_provider_info" in entry_points
    assert "mtc = mtc_provider.cli.app:app" in entry_points
    assert "[airflow.plugins]\nmtc_run_view = mtc_provider.plugins.run_view:MtcRunViewPlugin" in entry_points
    assert "mtc_provider/plugins/run_view.html" in names  # the run view's page ships with the plugin
    assert not [n for n in names if n.startswith("tests/") or "__pycache__" in n]


def test_sdist_has_sources_license_and_changelog(dist: Path) -> None:
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    assert {"pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "provider/mtc_provider/__init__.py"} <= names


def _imported_modules() -> set[str]:
    """Every module the package imports (`from a.b import c` counts as a.b.c: google.cloud is a namespace)."""
    found = set()
    for path in (REPO / "provider" / "mtc_provider").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


# Import name -> the distribution that provides it (the ones the code imports directly).
DISTRIBUTIONS = {
    "airflow.providers.google": "apache-airflow-providers-google",
    "airflow.providers.cncf.kubernetes": "apache-airflow-providers-cncf-kubernetes",
    "airflow": "apache-airflow",
    "google.cloud.storage": "google-cloud-storage",
    "google.cloud.container_v1": "google-cloud-container",
    "google.cloud.resourcemanager_v3": "google-cloud-resource-manager",
    "google.api_core": "google-api-core",
    "google.auth": "google-auth",
    "google.oauth2": "google-auth",
    "google_crc32c": "google-crc32c",
    "kubernetes_asyncio": "kubernetes-asyncio",
    "aiohttp": "aiohttp",
    "async_timeout": "async-timeout",
    "kubernetes": "kubernetes",
    "yaml": "pyyaml",
    "typer": "typer",
    "rich": "rich",
    "tenacity": "tenacity",
    "psutil": "psutil",
    "jsonschema": "jsonschema",
    "cryptography": "cryptography",
    "matplotlib": "matplotlib",
    "numpy": "numpy",
    "jax": "jax",
    "orbax": "orbax-checkpoint",
    "etils": "etils",
    "absl": "absl-py",
    "fastapi": "fastapi",
    "ml_goodput_measurement": "ml-goodput-measurement",
    "google.cloud.logging": "google-cloud-logging",
    "packaging": "packaging",
    "dateutil": "python-dateutil",
    "sqlalchemy": "sqlalchemy",
}


def test_every_imported_package_is_declared() -> None:
    stdlib = set(sys.stdlib_module_names) | {"mtc_provider", "__future__"}
    requirements = list(PYPROJECT["project"]["dependencies"])
    for extra in ("chart", "local", "goodput"):
        requirements += PYPROJECT["project"]["optional-dependencies"][extra]
    declared = {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}
    undeclared = []
    for module in sorted(_imported_modules()):
        if module.split(".")[0] in stdlib:
            continue
        prefixes = [p for p in DISTRIBUTIONS if module == p or module.startswith(p + ".")]
        dist = DISTRIBUTIONS[max(prefixes, key=len)] if prefixes else None
        if dist not in declared:
            undeclared.append((module, dist))
    assert not undeclared


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_wheel_installs_next_to_airflow_and_airflow_lists_the_provider(dist: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    requirements = tmp_path / "requirements.txt"
    export = subprocess.run([uv(), "export", "--frozen", "--no-emit-project", "--no-hashes", "--no-dev",
                             "--format", "requirements-txt", "--project", str(REPO)], capture_output=True, text=True,
                            check=True, timeout=120)
    requirements.write_text(export.stdout)
    env = {**os.environ, "UV_LINK_MODE": os.environ.get("UV_LINK_MODE", "hardlink")}
    env.pop("VIRTUAL_ENV", None)
    env.pop("UV_PROJECT_ENVIRONMENT", None)
    subprocess.run([uv(), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, env=env, timeout=120)
    # Airflow first (the user's environment), then the wheel on top of it.
    subprocess.run([uv(), "pip", "install", "--quiet", "--python", str(python), "-r", str(requirements)], check=True,
                   env=env, timeout=600)
    subprocess.run([uv(), "pip", "install", "--quiet", "--python", str(python), str(wheel(dist))], check=True,
                   env=env, timeout=300)
    home = tmp_path / "airflow-home"
    run_env = {k: v for k, v in env.items() if not k.startswith("AIRFLOW")}
    run_env.update(AIRFLOW_HOME=str(home), PATH=f"{venv / 'bin'}:{os.environ['PATH']}")
    listed = subprocess.run([str(venv / "bin" / "airflow"), "providers", "list", "--output", "json"],
                            capture_output=True, text=True, env=run_env, timeout=300, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert '"airflow-provider-mtc"' in listed.stdout, listed.stdout[-3000:]
    version = subprocess.run([str(venv / "bin" / "mtc"), "--version"], capture_output=True, text=True, env=run_env,
                             timeout=120, cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"mtc {__version__}"
    # The package came from the wheel, not from the checkout.
    where = subprocess.run([str(python), "-c", "import mtc_provider; print(mtc_provider.__file__)"],
                           capture_output=True, text=True, env=run_env, timeout=120, cwd=tmp_path)
    assert str(venv) in where.stdout
