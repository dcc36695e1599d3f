"""The core imports no Airflow, Kubernetes client or network library: checked in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from mtc_provider.core.basics.install import install_line

BLOCKED = ("airflow", "kubernetes", "kubernetes_asyncio", "google", "requests", "aiohttp", "httpx")

SCRIPT = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys

    BLOCKED = {blocked!r}
    # A *-nspkg.pth file in site-packages creates empty `google` namespace modules at start-up:
    # only what importing the core adds counts.
    before = set(sys.modules)

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked in the pure core: {{name}}")
            return None

    sys.meta_path.insert(0, Block())
    import mtc_provider.core as core

    imported = []
    # every module of every sub-package (walk_packages imports each package on its way down)
    for info in pkgutil.walk_packages(core.__path__, "mtc_provider.core."):
        importlib.import_module(info.name)
        imported.append(info.name.removeprefix("mtc_provider.core."))
    leaked = sorted(name for name in set(sys.modules) - before if name.split(".")[0] in BLOCKED)
    print(json.dumps({{"imported": imported, "leaked": leaked}}))
    """
)


def run(blocked: tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.format(blocked=blocked)], capture_output=True, text=True, timeout=60
    )


def test_every_core_module_imports_with_io_libraries_blocked() -> None:
    import json

    result = run(BLOCKED)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    expected = {"basics.errors", "definition.description.spec", "definition.shape.tpu", "definition.shape.sizing", "basics.versions",
                "basics.names", "definition.description.locations", "definition.cluster.iam", "basics.labels", "definition.render.maxtext",
                "definition.render.jobset_manifest", "definition.render.checkpoint_config", "definition.description.plan", "measure.progress",
                "attempt.status", "view.goodput", "basics.kind_rules"}
    assert expected <= set(report["imported"])
    assert report["leaked"] == []


def test_the_blocker_does_block() -> None:
    """The check can fail: blocking a module the core does use makes the import fail."""
    result = run(("decimal",))
    assert result.returncode != 0 and "blocked in the pure core: decimal" in result.stderr


# ---- the production package without the rehearsal (mtc-local) -------------------------------------------------
WITHOUT_LOCAL = textwrap.dedent(
    """
    import importlib, importlib.metadata, json, pkgutil, sys

    # As if mtc-local were not installed: its modules cannot be imported and its entry points are not listed
    # (importlib.metadata's entry_points, which the registry reads, filtered by distribution).
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "mtc_local":
                raise ImportError(f"blocked: mtc-local is not installed: {name}")
            return None

    sys.meta_path.insert(0, Block())
    listed = importlib.metadata.entry_points

    def entry_points(**selection):
        found = listed(**selection)
        if selection.get("group") != "mtc_provider.targets":
            return found
        return type(found)(p for p in found if p.dist is None or p.dist.name != "mtc-local")

    importlib.metadata.entry_points = entry_points
    import mtc_provider

    imported, failed = [], {}
    for info in pkgutil.walk_packages(mtc_provider.__path__, "mtc_provider."):
        try:
            importlib.import_module(info.name)
            imported.append(info.name)
        except Exception as err:  # noqa: BLE001 - reported, the test names it
            failed[info.name] = f"{type(err).__name__}: {err}"
    from mtc_provider.core.basics.errors import SpecError
    from mtc_provider import targets
    from mtc_provider.target import target_from_dict

    kinds = targets.kinds()
    try:
        target_from_dict({"kind": "local"})
        local = "accepted"
    except SpecError as err:
        local = str(err)
    try:
        target_from_dict(None)
        default = "accepted"
    except SpecError as err:
        default = str(err)
    try:
        target_from_dict({"namespace": "training"})
        kindless = "accepted"
    except SpecError as err:
        kindless = str(err)
    from mtc_provider.operators.delete_jobset import MtcDeleteJobSetOperator

    try:  # no target: refused before the hook (the first call) is made
        MtcDeleteJobSetOperator(task_id="teardown", name="llama-a1").execute({})
        operator = "accepted"
    except Exception as err:  # noqa: BLE001 - reported, the test names it
        operator = f"{type(err).__name__}: {err}"
    gke = targets.backend_for({"kind": "gke", "project_id": "p", "location": "l", "cluster_name": "c"}).console
    print(json.dumps({"imported": imported, "failed": failed, "kinds": list(kinds), "local": local,
                      "default": default, "kindless": kindless, "operator": operator, "gke": gke.cluster_name,
                      "leaked": sorted(m for m in sys.modules if m.split(".")[0] == "mtc_local")}))
    """
)


def test_every_production_module_imports_without_mtc_local_and_the_local_target_names_its_extra() -> None:
    """The product wheel stands alone: every module of mtc_provider imports with mtc_local blocked (as on a GKE-only
    worker, `pip install airflow-provider-mtc`); gke and kubernetes still work; choosing the local target (or the
    default, which is local) is an error that names the extra to install."""
    import json

    result = subprocess.run([sys.executable, "-c", WITHOUT_LOCAL], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])  # (a module may print when imported: __main__s)
    assert report["failed"] == {}
    assert {"mtc_provider.operators.jobset", "mtc_provider.triggers.jobset", "mtc_provider.targets.gke.backend",
            "mtc_provider.targets.kubernetes.backend", "mtc_provider.cli"} <= set(report["imported"])
    assert len(report["imported"]) > 80
    assert report["leaked"] == []
    assert report["kinds"] == ["gke", "kubernetes"] and report["gke"] == "c"
    # Asked for by name: the kind is the bad value. Left out: the error names the field left out, not "local".
    assert report["local"].startswith("target.kind: 'local' is not allowed; allowed: gke or kubernetes")
    assert report["default"].startswith("target: None is not allowed; allowed: a target of an installed kind: gke or "
                                        "kubernetes (without one a run goes to the local target")
    assert report["kindless"].startswith("target.kind: None is not allowed; allowed: a target of an installed kind")
    assert report["operator"] == "AirflowFailException: invalid spec: " + report["default"]
    for message in (report["local"], report["default"], report["kindless"]):
        assert install_line("local") in message, message
