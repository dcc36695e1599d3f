"""Two wheels from this repository, built by the pinned uv (`.tools/bin/uv build`): the provider's carries no
rehearsal (no local Kubernetes API server, GCS server, runner or workload; no JAX/Orbax requirement), mtc-local's
carries all of it and registers the `local` target; the provider's `local` extra installs mtc-local."""

from __future__ import annotations

import email
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.package.test_package import uv

SERVERS = {"mtc_local/cluster/apiserver.py", "mtc_local/cluster/store.py", "mtc_local/gcs/server.py",
           "mtc_local/supervisor.py", "mtc_local/workload/training.py",
           "mtc_local/cluster/crds/jobset-crd-v0.12.0.yaml", "mtc_local/target/__init__.py", "mtc_local/token.py"}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    for args in (["."], ["--package", "mtc-local"]):
        built = subprocess.run([uv(), "build", "--wheel", "--out-dir", str(out), *args], cwd=REPO,
                               capture_output=True, text=True, timeout=300)
        assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (product,) = out.glob("airflow_provider_mtc-*.whl")
    (local,) = out.glob("mtc_local-*.whl")
    return {"product": product, "local": local}


def _names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def _dist_info(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as zf:
        (path,) = [n for n in zf.namelist() if n.endswith(f".dist-info/{name}")]
        return zf.read(path).decode()


def test_the_product_wheel_carries_no_rehearsal(wheels) -> None:
    names = _names(wheels["product"])
    assert "mtc_provider/targets/gke/backend.py" in names and "mtc_provider/targets/registry.py" in names
    rehearsal = sorted(n for n in names if n.startswith(("mtc_local/", "mtc_provider/local/"))
                       or "/local/" in n or n.endswith(("apiserver.py", "crd-v0.12.0.yaml")))
    assert rehearsal == []
    requirements = email.message_from_string(_dist_info(wheels["product"], "METADATA")).get_all("Requires-Dist")
    base = [r for r in requirements if "extra ==" not in r]
    assert not [r for r in base if r.split()[0].split("[")[0] in ("jax", "orbax-checkpoint", "mtc-local")]
    assert any(r.startswith("mtc-local==") and "extra == 'local'" in r for r in requirements), requirements
    points = _dist_info(wheels["product"], "entry_points.txt")
    assert "[mtc_provider.targets]" in points and "gke = mtc_provider.targets.gke:KIND" in points
    assert "local =" not in points


def test_the_mtc_local_wheel_carries_the_servers_and_registers_local(wheels) -> None:
    names = _names(wheels["local"])
    assert SERVERS <= names, sorted(SERVERS - names)
    assert not [n for n in names if n.startswith("mtc_provider/")]  # the provider is a requirement, not a copy
    points = _dist_info(wheels["local"], "entry_points.txt")
    assert "local = mtc_local.target:KIND" in points
    requirements = email.message_from_string(_dist_info(wheels["local"], "METADATA")).get_all("Requires-Dist")
    assert "airflow-provider-mtc" in requirements and any(r.startswith("jax[cpu]") for r in requirements)


def test_the_installed_kinds_come_from_both_distributions() -> None:
    """In this environment (uv sync --all-extras) both distributions are installed: the registry lists the three
    kinds, local from mtc-local's entry point."""
    from importlib import metadata

    from mtc_provider.targets import kinds

    found = {p.name: p.dist.name for p in metadata.entry_points(group="mtc_provider.targets")}
    assert found == {"gke": "airflow-provider-mtc", "kubernetes": "airflow-provider-mtc", "local": "mtc-local"}
    assert set(kinds()) == set(found)
