"""The provider registers with Airflow: its info matches Airflow's own schema, and Airflow lists it."""

from __future__ import annotations

import importlib

import importlib.util
import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import jsonschema
import pytest

from mtc_provider import __version__
from mtc_provider.get_provider_info import get_provider_info

DISTRIBUTION = "airflow-provider-mtc"


def airflow_schema() -> dict:
    # Located without importing Airflow (an import takes seconds and is not what is tested here).
    (package_dir,) = importlib.util.find_spec("airflow").submodule_search_locations
    path = Path(package_dir) / "provider_info.schema.json"
    assert path.exists(), f"Airflow ships no {path}"
    return json.loads(path.read_text())


def test_provider_info_validates_against_airflows_schema() -> None:
    info = get_provider_info()
    jsonschema.validate(info, airflow_schema())
    assert info["package-name"] == DISTRIBUTION
    assert info["versions"] == [__version__]
    modules = {kind: [m for entry in info[kind] for m in entry["python-modules"]] for kind in ("operators", "sensors", "triggers", "hooks")}
    package = Path(__file__).resolve().parents[1] / "provider" / "mtc_provider"
    for kind in ("operators", "sensors", "triggers", "hooks"):
        shipped = sorted(f"mtc_provider.{kind}.{p.stem}" for p in (package / kind).glob("*.py") if p.stem != "__init__")
        assert sorted(modules[kind]) == shipped, f"{kind}: every module the provider ships is listed"
        for module in modules[kind]:
            importlib.import_module(module)
    from airflow.sdk import BaseOperatorLink

    for path in info["extra-links"]:
        module, _, name = path.rpartition(".")
        assert issubclass(getattr(importlib.import_module(module), name), BaseOperatorLink), path
    from airflow.executors.base_executor import BaseExecutor

    for path in info["executors"]:
        module, _, name = path.rpartition(".")
        assert issubclass(getattr(importlib.import_module(module), name), BaseExecutor), path
    integrations = {entry["integration-name"] for entry in info["integrations"]}
    for kind in ("operators", "sensors", "triggers", "hooks"):
        assert {entry["integration-name"] for entry in info[kind]} <= integrations


def test_schema_check_can_fail() -> None:
    info = dict(get_provider_info(), triggers=[{"python-modules": ["x"]}])  # integration-name is required
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(info, airflow_schema())


def test_entry_point_is_registered() -> None:
    (point,) = [ep for ep in entry_points(group="apache_airflow_provider") if ep.dist and ep.dist.name == DISTRIBUTION]
    assert point.load() is get_provider_info


def _clean_airflow(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """The real `airflow` command in a clean environment and a fresh home: the test session's unit-test mode logs
    to stdout and would break the JSON."""
    airflow = Path(sys.executable).with_name("airflow")
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
    env |= {
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow.db'}",
    }
    return subprocess.run([str(airflow), *args], capture_output=True, text=True, env=env, timeout=180)


def test_airflow_providers_list_shows_the_provider(tmp_path: Path) -> None:
    result = _clean_airflow(tmp_path, "providers", "list", "--output", "json")
    assert result.returncode == 0, result.stderr[-2000:]
    # Other providers' warnings (e.g. a cncf.kubernetes without a 'cli' section) may precede the JSON on stdout.
    document = result.stdout[result.stdout.index("\n[") + 1:] if not result.stdout.startswith("[") else result.stdout
    listed = {entry["package_name"]: entry for entry in json.loads(document)}
    assert DISTRIBUTION in listed, sorted(listed)
    assert listed[DISTRIBUTION]["version"] == __version__


def test_run_view_plugin_is_registered_and_airflow_accepts_its_views() -> None:
    """The `airflow.plugins` entry point names the run view plugin; Airflow's own response models for plugins
    (what the UI reads from /api/v2/plugins) accept its app and its three external views, each route unique."""
    from airflow.api_fastapi.core_api.datamodels.plugins import ExternalViewResponse, FastAPIAppResponse
    from airflow.plugins_manager import AirflowPlugin

    from mtc_provider.links.run_view import PREFIX
    from mtc_provider.plugins.run_view import MtcRunViewPlugin

    (point,) = [ep for ep in entry_points(group="airflow.plugins") if ep.dist and ep.dist.name == DISTRIBUTION]
    assert point.load() is MtcRunViewPlugin and issubclass(MtcRunViewPlugin, AirflowPlugin)
    views = [ExternalViewResponse.model_validate(view) for view in MtcRunViewPlugin.external_views]
    assert sorted(v.destination for v in views) == ["dag_run", "nav", "task_instance"]
    assert len({v.url_route for v in views}) == len(views)
    assert all(v.href.startswith(PREFIX + "/") for v in views)
    (app,) = MtcRunViewPlugin.fastapi_apps
    FastAPIAppResponse.model_validate({**app, "app": repr(app["app"])})
    from airflow.api_fastapi.app import RESERVED_URL_PREFIXES

    assert not any(app["url_prefix"].startswith(p) for p in RESERVED_URL_PREFIXES)
    # Not also under get_provider_info's `plugins` (read only with lazy_discover_providers=False): found both
    # ways, Airflow would report the second as an import error ("already registered").
    assert "plugins" not in get_provider_info()


def test_airflow_plugins_json_parses_with_the_provider_installed(tmp_path: Path) -> None:
    """Issue 35 item 9: a provider with executors and no `cli` section makes every `airflow` command log a 6-line
    warning to standard output, so `airflow plugins -o json` did not parse. The real command, a fresh home."""
    result = _clean_airflow(tmp_path, "plugins", "-o", "json")
    assert result.returncode == 0, result.stderr[-2000:]
    output = result.stdout + result.stderr
    warned = [line for line in output.splitlines() if "missing 'cli' section" in line]
    assert not any("mtc_provider" in line for line in warned), warned  # ours has its section
    stdout = result.stdout
    if "missing 'cli' section" in output:  # older cncf.kubernetes/celery providers (the lowest versions): theirs
        stdout = stdout[stdout.rindex("\n[") + 1:]
    plugins = json.loads(stdout)  # with today's providers, the whole of standard output is the document
    assert "mtc_run_view" in {plugin["name"] for plugin in plugins}


def test_the_cli_section_names_a_function_airflow_can_load() -> None:
    """Airflow imports each `cli` entry and calls it for the list of commands it adds (cli_parser.py)."""
    (path,) = get_provider_info()["cli"]
    module, _, name = path.rpartition(".")
    assert getattr(importlib.import_module(module), name)() == []
