"""The training DAG's trigger form (the run description's sections, core.definition.description.run) -> the specs its tasks use; bad values
name the field before any side effect."""

from __future__ import annotations

import pytest

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.description.params import form_with_conf, training_run

FORM = {
    "target": "local",
    "bucket": {"name": "mtc-checkpoints", "location": "us-central1"},
    "slices": {"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
    "sizing": {"parameters": 1e6},
    "checkpointing": {"run_name": "mtc-demo", "steps": 70, "enable_emergency_checkpoint": True,
                      "local_checkpoint_directory": "/local", "local_checkpoint_period": 4, "checkpoint_period": 20,
                      "enable_autocheckpoint": True},
    "workload": {"extra_flags": {"step_time_ms": 150}},
    "fault_plan": [{"kind": "sigkill_host", "at_step": 14, "slice": 0, "host": 0}],
}
GKE = {"target": "gke", "cluster": {"project_id": "my-project", "location": "us-central1", "name": "c"},
       "bucket": {"name": "ckpts"}, "slices": {"tpu_type": "v6e", "topology": "4x8", "num_slices": 2},
       "workload": {"image": "us-docker.pkg.dev/p/r/maxtext:1", "extra_flags": {"step_time_ms": 150}}}


def form(**changes):
    """FORM with sections changed field by field, as a trigger's conf changes the DAG's form."""
    return form_with_conf(FORM, changes)


def test_local_form_becomes_the_specs_of_every_task():
    run = training_run(FORM, "/home/u/.mtc/local")
    assert run["target"] == {"kind": "local", "home": "/home/u/.mtc/local", "namespace": "default"}
    assert run["checkpoint_dir"] == "/home/u/.mtc/local/buckets/mtc-checkpoints/mtc-demo/checkpoints"
    assert run["checkpointing"]["local_checkpoint_period"] == 4 and run["checkpointing"]["steps"] == 70
    assert run["workload"]["command"] == ["python", "-m", "mtc_local.workload"]
    assert run["workload"]["extra_flags"] == {"step_time_ms": 150, "seed": 0, "distributed_timeout_s": 60}
    assert run["workload"]["max_restarts"] == 3  # WorkloadSpec's, its one default
    assert run["fault_plan"] == FORM["fault_plan"]
    assert run["events_dir"].endswith("/mtc-demo/events") and run["ramdisk"] == "1Gi"
    assert (run["poll_interval"], run["stall_timeout"], run["workload"]["termination_grace_period_seconds"]) == (
        2.0, 120, 60)


def test_the_plan_carries_the_whole_description_and_it_parses_back_to_the_same_run():
    run = training_run(FORM, "/home/u/.mtc/local")
    again = training_run(run["description"], "/home/u/.mtc/local")
    assert again == run


def test_the_light_workload_is_a_local_choice():
    light = ["python", "-m", "mtc_local.light_workload"]
    run = training_run(form(workload={"command": light}), "/home/u/.mtc/local")
    assert run["workload"]["command"] == light
    assert run["workload"]["extra_flags"] == {"step_time_ms": 150, "seed": 0, "distributed_timeout_s": 60}


def test_gke_form_writes_to_the_bucket_and_drops_local_only_parts():
    run = training_run(form(**GKE), "/unused")
    assert run["checkpoint_dir"] == "gs://ckpts/mtc-demo/checkpoints"
    assert run["target"]["kind"] == "gke" and run["fault_plan"] == [] and run["events_dir"] is None
    assert run["workload"]["command"][:3] == ["python3", "-m", "maxtext.trainers.pre_train.train"]
    assert run["workload"]["extra_flags"] == {}
    assert (run["poll_interval"], run["stall_timeout"], run["workload"]["termination_grace_period_seconds"]) == (
        30.0, 1800, 300)


def test_kubernetes_form_goes_through_the_named_connection_and_writes_to_the_bucket():
    changes = {"target": "kubernetes", "kubernetes_conn_id": "my_cluster", "bucket": {"name": "ckpts"},
               "workload": {"image": "us-docker.pkg.dev/p/r/maxtext:1"}}
    run = training_run(form(**changes), "/unused", gcp_conn_id="gcs_conn")
    assert run["target"] == {"kind": "kubernetes", "kubernetes_conn_id": "my_cluster", "namespace": "default",
                             "gcp_conn_id": "gcs_conn", "project_id": None, "location": "us-central1"}
    assert run["checkpoint_dir"] == "gs://ckpts/mtc-demo/checkpoints"
    assert run["fault_plan"] == [] and run["workload"]["extra_flags"] == {}  # faults are injected locally only


IMAGE = {"image": "us-docker.pkg.dev/p/r/maxtext:1"}


@pytest.mark.parametrize(
    ("change", "field", "allowed"),
    [
        ({"target": "aws"}, "target.kind", "gke or kubernetes or local"),
        ({"target": "kubernetes", "kubernetes_conn_id": "", "workload": IMAGE}, "kubernetes_conn_id",
         "an Airflow Kubernetes connection id"),
        ({"target": "kubernetes", "workload": IMAGE, "bucket": {"location": "us-central1-a"}}, "bucket.location",
         "us-central1"),
        ({"slices": {"num_slices": 1}}, "slices.num_slices", ">= 2"),
        ({"slices": {"num_slices": "two"}}, "slices.num_slices", "an integer"),
        ({"checkpointing": {"run_name": "Mtc_Demo"}}, "checkpointing.run_name", "lower-case"),
        ({"checkpointing": {"local_checkpoint_period": 20}}, "checkpointing.local_checkpoint_period",
         "smaller than checkpoint_period"),
        ({"fault_plan": [{"kind": "reboot", "at_step": 3}]}, "fault_plan[0].kind", "sigkill_host"),
        ({"fault_plan": [{"kind": "hang"}]}, "fault_plan[0]", "exactly one of at_step, at_seconds"),
        ({"fault_plan": "kill"}, "fault_plan", "a list of faults"),
        ({"fault_plan": [{"kind": "hang", "at_step": 70}]}, "fault_plan[0].at_step", "below steps (70"),
        ({"workload": {"command": ["python", "-m", "jax"]}}, "workload.command", "light_workload"),
        ({**GKE, "workload": {**IMAGE, "command": ["python", "-m", "mtc_local.light_workload"]}},
         "workload.command", "the DAG author's"),
        ({**GKE, "cluster": {"project_id": "my-project", "location": "us-central1", "name": ""}}, "cluster.name",
         "lower-case"),
        ({**GKE, "cluster": None}, "cluster", "a cluster section"),
        ({**GKE, "bucket": {"location": "us-central1-a"}}, "bucket.location", "us-central1"),
        ({"workload": {"service_account": "from-form"}}, "workload.service_account", "the DAG author sets it"),
        ({"poll_interval": 0.5}, "poll_interval", ">= 1"),
        ({"checkpointing": {"steps": 0}}, "checkpointing.steps", "a positive integer"),
    ],
)
def test_bad_form_values_name_the_field_and_the_allowed_values(change, field, allowed):
    with pytest.raises(SpecError) as err:
        training_run(form(**change), "/home/u/.mtc/local")
    assert err.value.field == field
    assert allowed in err.value.allowed, err.value


def test_local_model_flags_are_flags_the_local_workload_takes():
    from mtc_provider.core.definition.render.flag_table import LOCAL_MODEL_FLAGS, LOCAL_RUN_FLAGS
    from mtc_local.workload import FLAG_SPECS

    assert set(LOCAL_MODEL_FLAGS) | set(LOCAL_RUN_FLAGS) <= set(FLAG_SPECS)


def test_author_settings_come_from_arguments_not_the_form():
    trainer = ("python3", "-m", "maxtext.trainers.pre_train.train")
    run = training_run(form(**{**GKE, "slices": {"topology": "4x4"}}), "/unused", gcp_conn_id="author_conn",
                       service_account="trainer", command=trainer)
    assert run["target"]["gcp_conn_id"] == "author_conn" and run["workload"]["service_account"] == "trainer"
    assert run["workload"]["command"] == list(trainer)
    with pytest.raises(SpecError) as err:
        training_run(form(**{**GKE, "workload": {**IMAGE, "command": ["rm", "-rf", "/"]}}), "/unused",
                     command=trainer)
    assert err.value.field == "workload.command"


def test_every_run_is_bounded_at_startup_by_a_default_derived_from_the_run():
    """Issue 32 (4): the training DAG set no startup_timeout, so pods stuck in ContainerCreating waited for ever.
    Left out, it is core.definition.cluster.startup's budget: image pull (900 s) + nodes (600 s + 60 s per further slice) + ramdisk
    mount (244 s: two retries at the kubelet's 2m2s back-off); set, the description's own value."""
    from mtc_provider.core.definition.cluster.startup import startup_budget

    local = training_run(FORM, "/home/u/.mtc/local")
    assert local["startup_timeout"] == 960.0 and local["description"]["startup_timeout"] == 960.0
    gke = training_run(form(**GKE), "/unused")
    slices = gke["description"]["slices"]["num_slices"]
    assert gke["startup_timeout"] == startup_budget("gke", slices).total == 900 + 600 + 60 * (slices - 1) + 244
    assert gke["startup_budget"].startswith(f"startup_timeout {gke['startup_timeout']:.0f}s = image pull 900s")
    assert training_run(form(startup_timeout=3600), "/home/u/.mtc/local")["startup_timeout"] == 3600
    with pytest.raises(SpecError, match="startup_timeout: 0 is not allowed"):
        training_run(form(startup_timeout=0), "/home/u/.mtc/local")

