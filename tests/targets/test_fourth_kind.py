"""A fourth target kind is one folder: tests/targets/fourth_kind/ (issue 36, "the registry owns per-kind rules").

Its `site/` is a directory as `pip install --target` leaves it: a package and its `.dist-info` whose
`entry_points.txt` registers `fourth` in the `mtc_provider.targets` group. `importlib.metadata` finds distributions
on every `sys.path` entry (https://docs.python.org/3/library/importlib.metadata.html#distributions: "searches
sys.path"), so the folder on `sys.path` installs the kind. With no edit outside that folder, a run description with
`target: fourth` is parsed with the kind's own defaults, `mtc plan` plans it, the launch operator launches it on the
kind's cluster (the in-memory JobSet double, tests/doubles/memory_jobset.py) and its trigger watches it to the end.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import yaml
from airflow.sdk.exceptions import TaskDeferred
from typer.testing import CliRunner

from mtc_provider import targets
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.description.run import parse_run, run_plan
from mtc_provider.core.definition.description.spec import RunConfig
from mtc_provider.operators.jobset import MtcJobSetOperator
from mtc_provider.targets import registry
from tests.doubles.memory_jobset import status_completed, status_running
from tests.support.js_helpers import FakeTI, finalize

pytestmark = pytest.mark.timeout(300)
SITE = Path(__file__).parent / "fourth_kind" / "site"
DESCRIPTION = {
    "target": "fourth",
    "slices": {"tpu_type": "v6e", "num_slices": 2},
    "checkpointing": {"run_name": "llama", "steps": 40, "checkpoint_period": 20},
    "workload": {},
}


@pytest.fixture
def fourth(monkeypatch):
    """The folder's site on sys.path, as a site directory is; the registry reads the entry points afresh."""
    monkeypatch.syspath_prepend(str(SITE))
    monkeypatch.setattr(registry, "_points", None)
    monkeypatch.setattr(registry, "_loaded", {})
    yield
    for name in [m for m in sys.modules if m == "mtc_fourth_kind" or m.startswith("mtc_fourth_kind.")]:
        sys.modules.pop(name)


def test_a_run_description_on_the_fourth_kind_takes_the_kinds_own_rules(fourth, tmp_path) -> None:
    assert "fourth" in targets.kinds()
    config = parse_run(DESCRIPTION, str(tmp_path / "home"))
    assert config.target == "fourth"
    # Its defaults (core.basics.kind_rules): its poll and grace period, its workload, a folder in the home, no image.
    assert config.poll_interval == 3.0 and config.workload.termination_grace_period_seconds == 45
    assert tuple(config.workload.command) == ("python", "-m", "mtc_fourth_kind.workload")
    assert config.checkpointing.base_output_directory == f"{tmp_path}/home/buckets/mtc-checkpoints"
    assert config.slices.hosts_per_slice == 1  # the smallest slice, one host: its slices are no GKE node pools
    plan = run_plan(config, str(tmp_path / "home"))
    assert plan["target"] == {"kind": "fourth", "home": str(tmp_path / "home"), "namespace": "default"}
    # Its rules refuse what they do not take, naming the kind.
    with pytest.raises(SpecError) as err:
        parse_run({**DESCRIPTION, "workload": {"command": ["python", "-m", "mtc_local.workload"]}}, str(tmp_path))
    assert err.value.field == "workload.command" and "on the fourth target (its workloads: toy)" in err.value.allowed
    with pytest.raises(SpecError) as err:  # (parse_run drops a form's fault_plan where it does not apply)
        RunConfig.from_dict({**config.to_dict(), "fault_plan": [{"kind": "kill", "at_step": 5}]})
    assert err.value.field == "fault_plan" and "fault_plan needs the local target" in err.value.allowed


def test_mtc_plan_plans_the_fourth_kind(fourth, tmp_path, monkeypatch) -> None:
    from mtc_provider.cli.app import app

    monkeypatch.setenv("MTC_LOCAL_HOME", str(tmp_path / "home"))
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(DESCRIPTION))
    result = CliRunner().invoke(app, ["plan", str(path)])
    assert result.exit_code == 0, result.output
    assert "Plan for target fourth" in result.output
    assert "JobSet llama run as local processes" in result.output
    assert "Not applicable locally" in result.output and "no GCS bucket" in result.output


def test_the_launch_operator_launches_the_fourth_kind_and_its_trigger_watches_it_to_the_end(fourth, tmp_path) -> None:
    import mtc_fourth_kind

    home = str(tmp_path / "home")
    plan = run_plan(parse_run(DESCRIPTION, home), home)
    cluster = mtc_fourth_kind.cluster(home)
    checkpoints = plan["checkpoint_dir"]

    def reach_the_end(obj):
        finalize(checkpoints, 40)
        return status_completed()

    cluster.plan([status_running(), reach_the_end])
    op = MtcJobSetOperator(task_id="train", target=plan["target"], slices=plan["slices"],
                           checkpointing=plan["checkpointing"], workload=plan["workload"], deferrable=True,
                           poll_interval=0, retries=2)
    ti = FakeTI(try_number=1, max_tries=2)
    context = {"ti": ti, "run_id": ti.run_id}
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    (name,) = cluster.created  # submitted to the fourth kind's cluster, by the registry's connection
    assert name.startswith("llama-") and name.endswith("-a1")
    trigger = deferred.value.trigger
    assert trigger.serialize()[1]["connection"] == {"kind": "fourth", "home": home}

    async def events():
        return [event async for event in trigger.run()]

    (event,) = asyncio.run(events())
    assert event.payload["kind"] == "ended" and event.payload["state"]["phase"] == "succeeded", event.payload
    assert event.payload["progress"]["newest_checkpoint"] == 40  # read from the kind's checkpoint folder
    result = op.execute_complete(context, event.payload)
    assert result["last_step"] == 40 and result["jobset_name"] == name and result["attempt"] == 1, result
    assert "training reached its target" in result["reason"]


def test_without_its_folder_on_sys_path_the_fourth_kind_is_refused_naming_the_installed_ones(tmp_path) -> None:
    with pytest.raises(SpecError) as err:
        parse_run(DESCRIPTION, str(tmp_path))
    assert err.value.field == "target.kind" and err.value.value == "fourth"
    assert err.value.allowed == "gke or kubernetes or local"


def test_mtc_list_and_status_reach_the_fourth_kind_by_target(fourth, tmp_path) -> None:
    """`--target` takes any installed kind, as the DAG gives it: the CLI reads the fourth kind's cluster."""
    import json

    import mtc_fourth_kind

    from mtc_provider.cli.app import app

    home = str(tmp_path / "home")
    plan = run_plan(parse_run(DESCRIPTION, home), home)
    mtc_fourth_kind.cluster(home).plan([status_running()])
    op = MtcJobSetOperator(task_id="train", target=plan["target"], slices=plan["slices"],
                           checkpointing=plan["checkpointing"], workload=plan["workload"], deferrable=True,
                           poll_interval=0, retries=2)
    ti = FakeTI(try_number=1, max_tries=2)
    with pytest.raises(TaskDeferred):
        op.execute({"ti": ti, "run_id": ti.run_id})
    (name,) = mtc_fourth_kind.cluster(home).created
    target = json.dumps({"kind": "fourth", "home": home})
    listed = CliRunner().invoke(app, ["list", "--target", target])
    assert listed.exit_code == 0, listed.output
    assert "llama" in listed.output
    (tmp_path / "target.yaml").write_text(yaml.safe_dump({"kind": "fourth", "home": home}))
    status = CliRunner().invoke(app, ["status", "llama", "--target", f"@{tmp_path / 'target.yaml'}"])
    assert status.exit_code == 0, status.output
    assert "Run llama in namespace default: running" in status.output and f" {name} " in status.output
    # A kind nobody installed, and a value that is no target, are refused naming --target and what it takes.
    unknown = CliRunner().invoke(app, ["list", "--target", '{"kind": "fifth"}'])
    assert unknown.exit_code != 0 and "--target" in unknown.output and "fourth" in unknown.output
    shapeless = CliRunner().invoke(app, ["list", "--target", "fourth"])
    assert shapeless.exit_code != 0 and "--target" in shapeless.output and "@FILE" in shapeless.output
