"""What the provider and the local workload must agree on across the process boundary.

The workload is its own process: it takes `key=value` flags with its own defaults (MaxText's, for the
checkpointing flags) and reads its identity from the ramdisk file and env the runner provides. Where a value
is necessarily written on both sides, these tests pin the two equal.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from mtc_provider.core.basics import vocabulary as V
from mtc_provider.core.definition.render.flag_table import LOCAL_MODEL_FLAGS
from mtc_provider.core.definition.description.params import training_run
from mtc_provider.core.definition.description.spec import CheckpointingSpec
from mtc_local.faults.kinds import FAULT_KINDS, FaultKind
from mtc_local.runner.faults import parse_plan
from mtc_local.runner.manifest import parse, pod_spec
from mtc_local.runner.pods import write_init_info
from mtc_local.workload import FLAG_SPECS, parse_flags, resolve_identity
from tests.support.local_cluster import make_jobset

MINIMAL_LOCAL_FORM = {"target": "local", "checkpointing": {"run_name": "contract", "steps": 10},
                      "slices": {"num_slices": 2, "topology": "2x2", "tpu_type": "v6e"}, "workload": {}}


def test_checkpointing_flag_defaults_are_the_providers():
    """A flag the provider leaves out must mean the same to the workload as the provider's default."""
    provider = {f.name: f.default for f in dataclasses.fields(CheckpointingSpec)
                if f.default is not dataclasses.MISSING and f.name in FLAG_SPECS}
    # MaxText's eight checkpointing flags and its four multi-tier ones (rendered only in that mode).
    assert len(provider) == 12
    unset = {name for name in provider if name.startswith("multi_tier_checkpointing_backup_interval_")}
    assert provider == {name: None if name in unset else FLAG_SPECS[name][1] for name in provider}
    assert {FLAG_SPECS[name][1] for name in unset} == {0}  # the workload's "unset": the spec never renders None


def test_local_run_defaults_are_the_workloads():
    """The extra flags the provider renders for a local run, when the form leaves them out, equal the workload's
    own defaults (so a workload started by hand behaves as one started by the operator)."""
    extra = training_run(MINIMAL_LOCAL_FORM, "/home/u/.mtc/local")["workload"]["extra_flags"]
    assert extra and {name: value for name, value in extra.items()} == {name: FLAG_SPECS[name][1] for name in extra}
    assert set(LOCAL_MODEL_FLAGS) <= set(FLAG_SPECS)


def test_the_rendered_flags_mean_the_same_to_the_workload_in_its_own_process(tmp_path):
    """The one flag table across the process boundary: the args the provider renders into the local JobSet, parsed
    by the workload's own parser in a fresh interpreter (as the runner starts it), give back the run description's
    values, flag by flag."""
    import json
    import subprocess

    from mtc_provider.core.definition.render.jobset_manifest import build_jobset
    from mtc_provider.core.definition.description.spec import CheckpointingSpec, WorkloadSpec, spec_from_dict
    from mtc_provider.core.definition.shape.tpu import SliceSpec

    form = {**MINIMAL_LOCAL_FORM, "checkpointing": {"run_name": "contract", "steps": 10,
                                                    "enable_emergency_checkpoint": True, "local_checkpoint_period": 3,
                                                    "local_checkpoint_directory": "/local", "checkpoint_period": 5},
            "workload": {"extra_flags": {"model_dim": 64, "step_time_ms": 7}}}
    run = training_run(form, str(tmp_path / "home"))
    body = build_jobset(spec_from_dict(SliceSpec, "slices", run["slices"]),
                        spec_from_dict(CheckpointingSpec, "checkpointing", run["checkpointing"]),
                        spec_from_dict(WorkloadSpec, "workload", run["workload"]))
    container = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "mtc_local.workload"]
    code = ("import dataclasses, json, sys; from mtc_local.workload import parse_flags; "
            "print(json.dumps(dataclasses.asdict(parse_flags(sys.argv[1:]))))")
    parsed = json.loads(subprocess.run([sys.executable, "-c", code, *container["args"]], capture_output=True,
                                       text=True, check=True, cwd=Path(__file__).resolve().parents[3]).stdout)
    described = {**run["checkpointing"], **run["workload"]["extra_flags"]}
    # An unset backup interval (None) is not rendered: the workload's default (0) means unset too.
    expected = {key: value for key, value in described.items() if key in FLAG_SPECS and value is not None}
    assert set(expected) >= {"run_name", "base_output_directory", "steps", "checkpoint_period", "model_dim",
                             "step_time_ms", "seed", "distributed_timeout_s", "enable_multi_tier_checkpointing",
                             "use_replicator_service"} and len(expected) == 17
    assert parsed["multi_tier_checkpointing_backup_interval_minutes"] == 0
    assert {key: parsed[key] for key in expected} == expected


def test_runner_env_and_init_info_give_the_workload_its_identity(tmp_path, monkeypatch):
    """The runner's pod env and jax-init-info.txt, read by the workload: the same process id and job shape."""
    plan = parse("default", make_jobset("js", tmp_path / "w.py", slices=2, hosts=2))
    rj, job_index, slice_index = plan.slices()[1]
    ramdisk = tmp_path / "rd"
    spec = pod_spec(plan, rj, job_index, slice_index, 1, "127.0.0.1:1234", ramdisk, 0, base_env={})
    for key in (V.ENV_NUM_SLICES, V.ENV_HOSTS_PER_SLICE, V.ENV_PROCESS_ID, V.ENV_COORDINATOR_ADDRESS,
                V.ENV_JOBSET_NAME, V.ENV_REPLICATED_JOB_NAME, V.ENV_JOB_INDEX, V.ENV_JOB_COMPLETION_INDEX,
                V.ENV_JOBSET_RESTART_ATTEMPT):
        assert key in spec.env, key
    monkeypatch.setattr("os.environ", dict(spec.env))

    from_env = resolve_identity(parse_flags(["run_name=r", "base_output_directory=/b"]))
    assert (from_env.process_id, from_env.num_slices, from_env.hosts_per_slice, from_env.source) == (
        spec.process_id, 2, 2, "env")

    write_init_info(ramdisk, spec.process_id, "127.0.0.1:4321")
    assert (ramdisk / V.INIT_INFO_FILENAME).is_file()
    from_file = resolve_identity(parse_flags(["run_name=r", "base_output_directory=/b",
                                              f"local_checkpoint_directory={ramdisk}"]))
    assert (from_file.process_id, from_file.coordinator_address, from_file.source) == (
        spec.process_id, "127.0.0.1:4321", "init-info-file")


def _example(row: FaultKind) -> dict:
    """A valid fault of the row's kind: start kinds at step 0, the bucket's outage with its duration."""
    when = {"at_step": 0, "seconds": 5} if row.when == "start" else {"at_step": 3}
    return {"kind": row.kind, **when, **({"seconds": 5, "status": 429} if row.scope == "bucket" else {})}


@pytest.mark.parametrize("row", FAULT_KINDS, ids=lambda row: row.kind)
def test_every_fault_kind_is_planned_with_its_scope(row):
    """The runner's fault plan and the provider's form both take every kind of the one table, a host for host
    faults only, a slice for host and slice faults only."""
    (fault,) = parse_plan([_example(row)], num_slices=2, hosts_per_slice=2)
    assert (fault.host is not None) == (row.scope == "host")
    assert (fault.slice is not None) == (row.scope != "bucket")
    form = {**MINIMAL_LOCAL_FORM, "slices": {**MINIMAL_LOCAL_FORM["slices"], "topology": "2x4"},
            "fault_plan": [{**_example(row), **({} if row.scope == "bucket" else {"slice": 1}),
                            **({"host": 0} if row.scope == "host" else {})}]}
    assert training_run(form, "/home/u/.mtc/local")["fault_plan"][0]["kind"] == row.kind


BAD_FAULTS = [
    ({"kind": "image_pull", "at_step": 2}, "[0].at_step", "absent or 0"),
    ({"kind": "unschedulable", "at_seconds": 1}, "[0].at_seconds", "absent"),
    ({"kind": "unschedulable", "seconds": 0}, "[0].seconds", "> 0"),
    ({"kind": "listing_outage", "at_step": 1}, "[0].seconds", "> 0"),
    ({"kind": "listing_outage", "at_step": 1, "seconds": 9, "status": 500}, "[0].status", "403, 429, 503"),
    ({"kind": "listing_outage", "at_step": 1, "seconds": 9, "slice": 0}, "[0].slice", "absent"),
    ({"kind": "hang", "at_step": 1, "seconds": 9}, "[0].seconds", "absent"),
]


@pytest.mark.parametrize("bad,field,allowed", BAD_FAULTS, ids=[b[0]["kind"] + b[1] for b in BAD_FAULTS])
def test_bad_fault_fields_are_refused_alike_by_form_and_runner(bad, field, allowed):
    """Both sides name the field and what is allowed, before anything runs."""
    from mtc_provider.core.basics.errors import SpecError

    with pytest.raises(SpecError) as runner_err:
        parse_plan([bad], num_slices=2, hosts_per_slice=2)
    with pytest.raises(SpecError) as form_err:
        training_run({**MINIMAL_LOCAL_FORM, "fault_plan": [bad]}, "/home/u/.mtc/local")
    for err in (runner_err.value, form_err.value):
        assert err.field.endswith(field) and allowed in err.allowed, err


def test_workload_package_imports_no_jax():
    """The runner, the light workload and these tests import the package for its flags: no JAX until it runs."""
    import subprocess

    code = "import sys, mtc_local.workload; print('jax' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3]).stdout.split()
    assert out == ["False", "False"]
