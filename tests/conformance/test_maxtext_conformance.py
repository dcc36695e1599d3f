"""Conformance with the real MaxText 0.2.5: its own config loader accepts what we render and reads back our values.

Every command we render (the golden manifests, the sample DAGs' default plans on both targets, the
persistent-only and multi-tier modes, extra flags of each value type) goes through MaxText's `pyconfig.initialize` in a Python 3.12 environment holding `maxtext==0.2.5`
(scripts/maxtext_env.py); only JAX's distributed start-up is replaced by recorders (maxtext_probe.py). A case
passes when MaxText accepts it and every value it parsed equals the one in our spec. The other direction is
checked too: multi-tier combinations our spec rejects, rendered by hand, are rejected by MaxText as well.

Slow: building the environment the first time takes about a minute; a warm run ~15 s.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_probe

from mtc_provider.cli.app import load_config
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.render.jobset_manifest import pod_template
from mtc_provider.core.definition.render.maxtext import container_command, maxtext_command, render_flags
from mtc_provider.core.definition.description.params import form_with_conf, training_run
from mtc_provider.core.definition.description.spec import CheckpointingSpec, WorkloadSpec

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "golden"))
import regenerate  # noqa: E402

pytestmark = pytest.mark.slow

# Triggers of the training DAG: the run description's sections (core.definition.description.run), laid over its form field by field.
GKE_FORM = {"target": "gke", "cluster": {"project_id": "my-project", "location": "us-central1", "name": "tpu-cluster"},
            "workload": {"image": "us-docker.pkg.dev/my-project/maxtext/maxtext:0.2.5"}}
MULTI_TIER_FORMS = {
    "multi-tier-minutes": {"enable_emergency_checkpoint": False, "enable_multi_tier_checkpointing": True,
                           "multi_tier_checkpointing_backup_interval_minutes": 15},
    "multi-tier-steps": {"enable_emergency_checkpoint": False, "enable_multi_tier_checkpointing": True,
                         "multi_tier_checkpointing_backup_interval_steps": 4, "use_replicator_service": True},
}
PERSISTENT_ONLY = {"enable_emergency_checkpoint": False, "local_checkpoint_directory": "", "local_checkpoint_period": 0}
# Extra flags of every value type we render (float exponents, spaces, booleans).
EXTRA_FLAGS = {"learning_rate": 1e-05, "per_device_batch_size": 0.5, "tokenizer_path": "assets/tokenizer v2",
               "enable_goodput_recording": False, "max_target_length": 2048}
# Multi-tier flags our spec refuses (the field it names); MaxText must refuse them too.
REFUSED = {
    "both-intervals": ({"multi_tier_checkpointing_backup_interval_minutes": 15,
                        "multi_tier_checkpointing_backup_interval_steps": 8},
                       "multi_tier_checkpointing_backup_interval_minutes", "Exactly one of"),
    "no-interval": ({}, "multi_tier_checkpointing_backup_interval_minutes", "Exactly one of"),
    "steps-below-local-period": ({"multi_tier_checkpointing_backup_interval_steps": 3},
                                 "multi_tier_checkpointing_backup_interval_steps", "must be >= `local_checkpoint_period`"),
    "no-local-period": ({"multi_tier_checkpointing_backup_interval_minutes": 15, "local_checkpoint_period": 0},
                        "local_checkpoint_period", "must be > 0 for multi-tier"),
}


def training_dag_defaults() -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(REPO / "dags" / "mtc_resilient_training.py")).dags["mtc_resilient_training"]
    return dict(dag.params.dump())


def case(name: str, checkpointing: CheckpointingSpec, workload: WorkloadSpec) -> dict[str, Any]:
    command, args = container_command(checkpointing, workload)
    expected = {**checkpointing.maxtext_flags(), **dict(workload.extra_flags)}
    return {"name": name, "command": command, "args": args, "expected": expected}


def golden_cases() -> list[dict[str, Any]]:
    cases = []
    for golden, example in sorted(regenerate.CASES.items()):
        jobset = next(doc for doc in yaml.safe_load_all((regenerate.GOLDEN / golden).read_text()) if doc["kind"] == "JobSet")
        container = pod_template(jobset)["spec"]["containers"][0]
        config = load_config(REPO / example)
        expected = case(golden, config.checkpointing, config.workload)
        assert (container["command"], container["args"]) == (expected["command"], expected["args"])
        cases.append(expected)
    return cases


def dag_cases(defaults: dict[str, Any], home: Path) -> list[dict[str, Any]]:
    local = training_run(defaults, str(home))
    spec = CheckpointingSpec(**local["checkpointing"])
    # The local target runs our workload, not MaxText: its checkpointing flags are MaxText's, checked with the trainer.
    cases = [{"name": "training-dag-local", "command": list(maxtext_command()), "args": render_flags(spec.maxtext_flags()),
              "expected": spec.maxtext_flags()}]
    for name, extra in {"training-dag-gke": {}, "persistent-only": PERSISTENT_ONLY, **MULTI_TIER_FORMS}.items():
        run = training_run(form_with_conf(defaults, {**GKE_FORM, "checkpointing": extra}), str(home))
        cases.append(case(name, CheckpointingSpec(**run["checkpointing"]), WorkloadSpec(**run["workload"])))
    # The evaluation DAG's GKE job: MaxText's decode entry on a step's items, checkpointing off.
    evaluation = case("evaluation-dag-gke",
                      CheckpointingSpec(run_name="mtc-demo-eval", base_output_directory="gs://my-bucket", steps=1,
                                        enable_checkpointing=False),
                      WorkloadSpec(jobset_name="eval-s20", command=maxtext_command(entry="decode"),
                                   extra_flags={"load_parameters_path": "gs://my-bucket/mtc-demo/checkpoints/20/items"}))
    extras = case("extra-flag-values", CheckpointingSpec(run_name="r", base_output_directory="gs://b", steps=10),
                  WorkloadSpec(jobset_name="r", extra_flags=EXTRA_FLAGS))
    return [*cases, evaluation, extras]


def refused_cases(defaults: dict[str, Any], home: Path) -> list[dict[str, Any]]:
    base = form_with_conf(defaults, {**GKE_FORM, "checkpointing": {
        "enable_emergency_checkpoint": False, "enable_multi_tier_checkpointing": True, "local_checkpoint_period": 4}})
    cases = []
    for name, (flags, field, _) in REFUSED.items():
        with pytest.raises(SpecError) as caught:
            training_run(form_with_conf(base, {"checkpointing": flags}), str(home))
        assert caught.value.field == f"checkpointing.{field}", name
        args = render_flags({"run_name": "r", "base_output_directory": "gs://b", "enable_multi_tier_checkpointing": True,
                             "local_checkpoint_directory": "/local", "local_checkpoint_period": 4, **flags})
        cases.append({"name": f"refused-{name}", "command": list(maxtext_command()), "args": args})
    return cases


@pytest.fixture(scope="module")
def conformance(maxtext_python, tmp_path_factory) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    home = tmp_path_factory.mktemp("home")
    defaults = training_dag_defaults()
    cases = golden_cases() + dag_cases(defaults, home) + refused_cases(defaults, home)
    cases.append({"name": "empty-local-directory", "command": list(maxtext_command()),
                  "args": ["run_name=r", "base_output_directory=gs://b", "local_checkpoint_directory="]})
    cases.append({"name": "pre-rename-trainer", "command": list(maxtext_command("pre-rename")),
                  "args": ["run_name=r", "base_output_directory=gs://b"]})
    results = run_probe(maxtext_python, [{k: c[k] for k in ("name", "command", "args")} for c in cases],
                        tmp_path_factory.mktemp("cwd"))
    return cases, results


ACCEPTED = sorted(regenerate.CASES) + ["training-dag-local", "training-dag-gke", "persistent-only", *MULTI_TIER_FORMS,
                                       "evaluation-dag-gke", "extra-flag-values"]


@pytest.mark.parametrize("name", ACCEPTED)
def test_maxtext_accepts_and_reads_back_our_values(conformance, name: str) -> None:
    cases, results = conformance
    [expected] = [c for c in cases if c["name"] == name]
    result = results[name]
    assert result["ok"], f"MaxText 0.2.5 refused {expected['command']} {expected['args']}:\n{result.get('traceback')}"
    assert result["values"] == expected["expected"]


def test_the_guides_mode_starts_jax_from_the_mtc_init_file(conformance) -> None:
    """enable_emergency_checkpoint on a TPU: MaxText reads jax-init-info.txt from the ramdisk the JobSet mounts."""
    _, results = conformance
    for name in [*sorted(regenerate.CASES), "training-dag-gke"]:
        assert [call["call"] for call in results[name]["distributed"]] == [
            "initialize_jax_for_tpu_with_emergency_checkpointing"], name


@pytest.mark.parametrize("name, minutes, steps", [("multi-tier-minutes", 15, None), ("multi-tier-steps", None, 4)])
def test_multi_tier_mode_starts_orbax_multi_tier_initialization(conformance, name, minutes, steps) -> None:
    _, results = conformance
    [call] = results[name]["distributed"]
    assert call["call"] == "initialize_multi_tier_checkpointing"
    assert {k: call["kwargs"][k] for k in ("local_checkpoint_directory", "backup_interval_minutes",
                                           "backup_interval_steps", "run_name")} == {
        "local_checkpoint_directory": "/local", "backup_interval_minutes": minutes, "backup_interval_steps": steps,
        "run_name": "mtc-demo"}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_maxtext_refuses_what_our_spec_refuses(conformance, name: str) -> None:
    _, results = conformance
    result = results[f"refused-{name}"]
    assert not result["ok"] and REFUSED[name][2] in result["error"], result


def test_the_pre_rename_trainer_does_not_exist_in_0_2_5(conformance) -> None:
    """Why the default changed: the command we used to render exits at once on the current release."""
    _, results = conformance
    result = results["pre-rename-trainer"]
    assert not result["ok"] and result["error"] == "ModuleNotFoundError: No module named 'MaxText'"


def test_an_empty_value_is_read_as_null_and_refused(conformance) -> None:
    """Why empty values are never rendered (docs/maxtext.md, known limits)."""
    _, results = conformance
    result = results["empty-local-directory"]
    assert not result["ok"] and "local_checkpoint_directory" in result["error"]
    assert "Input should be a valid string" in result["error"]


def test_use_replicator_service_is_read_by_no_code_path(maxtext_python) -> None:
    """docs/maxtext.md, known limits: in 0.2.5 only the config schema and the deprecated loader name the key."""
    package = next(Path(maxtext_python).parent.parent.glob("lib/python3.*/site-packages/maxtext"))
    naming = sorted(str(path.relative_to(package)) for path in package.rglob("*.py")
                    if "use_replicator_service" in path.read_text(encoding="utf-8", errors="replace"))
    assert naming == ["configs/pyconfig_deprecated.py", "configs/types.py"]
