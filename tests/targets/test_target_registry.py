"""The one registry of targets (mtc_provider/targets/registry.py): a new target is one folder and one registry line.

A tiny distribution (`mtc-memory-target`, written here: one package and one `mtc_provider.targets` entry point) is
installed by the pinned uv into a temporary directory put on sys.path, and a launch runs through it with the
provider untouched: submit, find by run, status, newest checkpoint step, and the error of a bad kind. Then the
precedence of `registered()` over the installed kinds (innermost block first, restored on exit)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mtc_provider import targets
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.hooks.jobset import MtcJobSetHook
from mtc_provider.target import target_from_dict
from mtc_provider.targets import registry
from tests.conftest import REPO
from tests.doubles.memory_jobset import AsyncMemoryJobSetApi, MemoryJobSetApi, MemoryJobSetCluster, status_running
from tests.package.test_package import uv



def finalize(checkpoint_dir: str, step: int) -> None:
    """A finalized step as Orbax leaves it on a bucket folder (`<step>/commit_success.txt`)."""
    path = Path(checkpoint_dir) / str(step)
    path.mkdir(parents=True, exist_ok=True)
    (path / "commit_success.txt").write_text("ok")

PACKAGE = '''
"""A target kind of its own: JobSets in an in-memory cluster (tests/doubles), checkpoints in a local folder."""
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from mtc_provider.targets.common import InjectsNoFaults, ListsCheckpointsByPath
from mtc_provider.targets.registry import TargetKind
from tests.doubles.memory_jobset import AsyncMemoryJobSetApi, MemoryJobSetApi, MemoryJobSetCluster

CLUSTERS: dict = {}


def cluster(name: str) -> MemoryJobSetCluster:
    return CLUSTERS.setdefault(name, MemoryJobSetCluster())


@dataclass
class MemoryTarget:
    cluster: str = "one"
    namespace: str = "default"
    template_fields: Sequence[str] = field(default=("cluster",), repr=False, compare=False)
    kind: str = field(default="memory", init=False)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("template_fields")
        return data


class MemoryCluster:
    def readiness(self, slices, sizing, checkpoint_configuration_name, bucket_name=None, capacity=("on-demand", "")):
        return []

    def kubernetes_client_factory(self):
        raise NotImplementedError("no cluster-scoped objects in memory")

    def provided_by_target(self, step, total_hosts):
        return "does not apply in memory"

    def control_plane(self):
        raise NotImplementedError


@dataclass
class MemoryBackend(ListsCheckpointsByPath, InjectsNoFaults):
    target: MemoryTarget
    api_endpoint: Any = None
    console: Any = None

    def __post_init__(self):
        self.cluster = MemoryCluster()

    def jobset_connection(self):
        return {"kind": "memory", "cluster": self.target.cluster}

    def bucket(self):
        raise NotImplementedError

    def google(self):
        return "google_cloud_default", None


KIND = TargetKind("memory", MemoryTarget, MemoryBackend,
                  lambda connection, **_: MemoryJobSetApi(cluster(connection["cluster"])),
                  lambda connection, **_: AsyncMemoryJobSetApi(cluster(connection["cluster"])),
                  lambda connection: f"memory cluster {connection['cluster']}")
'''

PYPROJECT = '''
[build-system]
requires = ["hatchling>=1.27"]
build-backend = "hatchling.build"

[project]
name = "mtc-memory-target"
version = "0.0.1"

[project.entry-points."mtc_provider.targets"]
memory = "mtc_memory_target:KIND"

[tool.hatch.build.targets.wheel]
packages = ["mtc_memory_target"]
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The distribution, installed (`uv pip install --target`) into a directory of its own."""
    root = tmp_path_factory.mktemp("memory-target")
    source = root / "src"
    (source / "mtc_memory_target").mkdir(parents=True)
    (source / "mtc_memory_target" / "__init__.py").write_text(textwrap.dedent(PACKAGE))
    (source / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    installed = subprocess.run([uv(), "pip", "install", "--quiet", "--no-deps", "--python", sys.executable,
                                "--target", str(root / "site"), str(source)], capture_output=True, text=True,
                               timeout=300, cwd=REPO)
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert (root / "site" / "mtc_memory_target" / "__init__.py").is_file()
    return root / "site"


@pytest.fixture
def installed(site, monkeypatch):
    """The directory on sys.path, as a site directory is; the registry reads the entry points afresh."""
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry, "_points", None)
    monkeypatch.setattr(registry, "_loaded", {})
    yield
    sys.modules.pop("mtc_memory_target", None)


def test_a_target_from_an_installed_distribution_runs_a_launch(installed, tmp_path) -> None:
    assert "memory" in targets.kinds() and {"gke", "kubernetes", "local"} <= set(targets.kinds())
    target = target_from_dict({"kind": "memory", "cluster": "lab"})
    assert type(target).__module__ == "mtc_memory_target"
    import mtc_memory_target

    lab = mtc_memory_target.cluster("lab")
    lab.plan([status_running()])
    hook = MtcJobSetHook(target={"kind": "memory", "cluster": "lab"})
    checkpointing = {"run_name": "llama", "base_output_directory": str(tmp_path / "out"), "steps": 100}
    hook.submit({"tpu_type": "v6e", "topology": "2x2", "num_slices": 2}, checkpointing,
                {"jobset_name": "llama-a1"}, attempt=1)
    lab.advance("default", "llama-a1")
    assert lab.created == ["llama-a1"] and mtc_memory_target.cluster("one").created == []
    assert [(a.name, a.phase) for a in hook.find_by_run("llama")] == [("llama-a1", "running")]
    finalize(str(tmp_path / "out" / "llama" / "checkpoints"), 30)
    assert hook.newest_step(str(tmp_path / "out" / "llama" / "checkpoints")) == 30
    assert targets.connection_for(target) == {"kind": "memory", "cluster": "lab"}
    assert targets.describe_connection({"kind": "memory", "cluster": "lab"}) == "memory cluster lab"
    with pytest.raises(SpecError, match=r"target\.shelf.*one of the memory target's fields: cluster, namespace"):
        target_from_dict({"kind": "memory", "shelf": 1})


def test_without_the_distribution_the_kind_is_refused_naming_the_installed_ones() -> None:
    with pytest.raises(SpecError) as err:
        target_from_dict({"kind": "memory"})
    assert err.value.field == "target.kind" and err.value.value == "memory"
    assert err.value.allowed == "gke or kubernetes or local"
    with pytest.raises(SpecError, match=r"connection\.kind: 'memory'"):
        targets.jobset_api({"kind": "memory"})


def _kind(name: str, tag: str) -> registry.TargetKind:
    """A kind whose backend says which registration served it."""
    real = registry.kind_of(name)
    return registry.TargetKind(name, real.target_class, lambda target, endpoint: tag, real.jobset_api,
                               real.async_jobset_api, real.describe)


def test_registered_takes_precedence_over_the_entry_point_innermost_first_and_is_restored() -> None:
    gke = {"kind": "gke", "project_id": "p", "location": "l", "cluster_name": "c"}
    installed = type(targets.backend_for(gke)).__name__
    assert installed == "GkeBackend"
    with targets.registered(_kind("gke", "outer")):
        assert targets.backend_for(gke) == "outer"
        with targets.registered(_kind("gke", "inner")):
            assert targets.backend_for(gke) == "inner"
        assert targets.backend_for(gke) == "outer"
        with pytest.raises(RuntimeError):  # left by an error: restored all the same
            with targets.registered(_kind("gke", "failing")):
                raise RuntimeError
        assert targets.backend_for(gke) == "outer"
    assert type(targets.backend_for(gke)).__name__ == installed
    assert targets.kinds().count("gke") == 1


def test_a_registered_kind_not_installed_is_chosen_and_listed_first() -> None:
    real = registry.kind_of("kubernetes")
    extra = registry.TargetKind("extra", real.target_class, lambda target, endpoint: "extra", real.jobset_api,
                                real.async_jobset_api)
    with targets.registered(extra):
        assert targets.kinds()[0] == "extra"
        assert registry.kind_of("extra") is extra
    assert "extra" not in targets.kinds()


def test_registered_jobset_api_replaces_only_the_jobsets_of_the_kind() -> None:
    cluster = MemoryJobSetCluster()
    target = {"kind": "kubernetes", "kubernetes_conn_id": "k"}
    with targets.registered_jobset_api("kubernetes", lambda c: MemoryJobSetApi(cluster),
                                       lambda c: AsyncMemoryJobSetApi(cluster)):
        connection = targets.connection_for(target)
        assert connection["kind"] == "kubernetes"
        assert isinstance(targets.jobset_api(connection), MemoryJobSetApi)
        assert type(targets.backend_for(target)).__name__ == "KubernetesBackend"
    assert type(targets.jobset_api(targets.connection_for(target))).__name__ == "KubernetesJobSetApi"
