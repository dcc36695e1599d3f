"""The training DAG's trigger form -> the specs its tasks use; bad values name the field before any side effect."""

from __future__ import annotations

import pytest

from mtc_provider.core.errors import SpecError
from mtc_provider.core.params import training_run

FORM = {
    "target": "local", "run_name": "mtc-demo", "steps": 70, "enable_emergency_checkpoint": True,
    "local_checkpoint_directory": "/local", "local_checkpoint_period": 4, "checkpoint_period": 20,
    "enable_autocheckpoint": True, "num_slices": 2, "topology": "2x2", "tpu_type": "v6e", "parameters": 1e6,
    "fault_plan": [{"kind": "sigkill_host", "at_step": 14, "slice": 0, "host": 0}], "step_time_ms": 150,
}


def test_local_form_becomes_the_specs_of_every_task():
    run = training_run(FORM, "/home/u/.mtc/local")
    assert run["target"] == {"kind": "local", "home": "/home/u/.mtc/local", "namespace": "default"}
    assert run["checkpoint_dir"] == "/home/u/.mtc/local/buckets/mtc-checkpoints/mtc-demo/checkpoints"
    assert run["checkpointing"]["local_checkpoint_period"] == 4 and run["checkpointing"]["steps"] == 70
    assert run["workload"]["command"] == ["python", "-m", "mtc_local.workload"]
    assert run["workload"]["extra_flags"] == {"step_time_ms": 150, "seed": 0, "distributed_timeout_s": 60}
    assert run["fault_plan"] == FORM["fault_plan"]
    assert run["events_dir"].endswith("/mtc-demo/events") and run["ramdisk"] == "1Gi"


def test_the_light_workload_is_a_local_choice():
    run = training_run({**FORM, "local_workload": "light"}, "/home/u/.mtc/local")
    assert run["workload"]["command"] == ["python", "-m", "mtc_local.light_workload"]
    assert run["workload"]["extra_flags"] == {"step_time_ms": 150, "seed": 0, "distributed_timeout_s": 60}


def test_gke_form_writes_to_the_bucket_and_drops_local_only_parts():
    form = {**FORM, "target": "gke", "project_id": "p", "location": "us-central1", "cluster_name": "c",
            "bucket": "ckpts", "topology": "4x8", "image": "us-docker.pkg.dev/p/r/maxtext:1"}
    run = training_run(form, "/unused")
    assert run["checkpoint_dir"] == "gs://ckpts/mtc-demo/checkpoints"
    assert run["target"]["kind"] == "gke" and run["fault_plan"] == [] and run["events_dir"] is None
    assert run["workload"]["command"][:3] == ["python3", "-m", "maxtext.trainers.pre_train.train"]
    assert run["workload"]["extra_flags"] == {}


def test_kubernetes_form_goes_through_the_named_connection_and_writes_to_the_bucket():
    form = {**FORM, "target": "kubernetes", "kubernetes_conn_id": "my_cluster", "bucket": "ckpts",
            "image": "us-docker.pkg.dev/p/r/maxtext:1"}
    run = training_run(form, "/unused", gcp_conn_id="gcs_conn")
    assert run["target"] == {"kind": "kubernetes", "kubernetes_conn_id": "my_cluster", "namespace": "default",
                             "gcp_conn_id": "gcs_conn", "project_id": None, "location": "us-central1"}
    assert run["checkpoint_dir"] == "gs://ckpts/mtc-demo/checkpoints"
    assert run["fault_plan"] == [] and run["workload"]["extra_flags"] == {}  # faults are injected locally only


@pytest.mark.parametrize(
    ("change", "field", "allowed"),
    [
        ({"target": "aws"}, "params.target", "local or gke or kubernetes"),
        ({"target": "kubernetes", "kubernetes_conn_id": "", "image": "i:1"}, "params.kubernetes_conn_id",
         "an Airflow Kubernetes connection id"),
        ({"target": "kubernetes", "image": "i:1", "bucket_location": "us-central1-a"}, "bucket.location",
         "us-central1"),
        ({"num_slices": 1}, "slices.num_slices", ">= 2"),
        ({"num_slices": "two"}, "params.num_slices", "an integer"),
        ({"run_name": "Mtc_Demo"}, "checkpointing.run_name", "lower-case"),
        ({"local_checkpoint_period": 20}, "checkpointing.local_checkpoint_period", "smaller than checkpoint_period"),
        ({"fault_plan": [{"kind": "reboot", "at_step": 3}]}, "params.fault_plan[0].kind", "sigkill_host"),
        ({"fault_plan": [{"kind": "hang"}]}, "params.fault_plan[0]", "at_step or at_seconds"),
        ({"fault_plan": "kill"}, "params.fault_plan", "a list of faults"),
        ({"local_workload": "jax"}, "params.local_workload", "light"),
        ({"target": "gke", "project_id": "p", "location": "l", "cluster_name": "c", "local_workload": "light"},
         "params.local_workload", "full on gke"),
        ({"target": "gke", "project_id": "p", "location": "us-central1", "cluster_name": ""},
         "params.cluster_name", "a value on the gke target"),
        ({"target": "gke", "project_id": "p", "location": "l", "cluster_name": "c", "bucket_location": "us-central1-a"},
         "bucket.location", "us-central1"),
    ],
)
def test_bad_form_values_name_the_field_and_the_allowed_values(change, field, allowed):
    with pytest.raises(SpecError) as err:
        training_run({**FORM, **change}, "/home/u/.mtc/local")
    assert err.value.field == field
    assert allowed in err.value.allowed


def test_local_model_flags_are_flags_the_local_workload_takes():
    from mtc_provider.core.params import LOCAL_MODEL_FLAGS
    from mtc_local.workload import FLAG_SPECS

    assert set(LOCAL_MODEL_FLAGS) <= set(FLAG_SPECS)


def test_author_settings_come_from_arguments_not_the_form():
    form = {**FORM, "target": "gke", "project_id": "p", "location": "us-central1", "cluster_name": "c",
            "image": "us-docker.pkg.dev/p/r/maxtext:1", "gcp_conn_id": "from_form", "service_account": "from-form",
            "command": "rm -rf /", "topology": "4x4"}
    run = training_run(form, "/unused", gcp_conn_id="author_conn", service_account="trainer",
                       command=("python3", "-m", "maxtext.trainers.pre_train.train"))
    assert run["target"]["gcp_conn_id"] == "author_conn" and run["workload"]["service_account"] == "trainer"
    assert run["workload"]["command"] == ["python3", "-m", "maxtext.trainers.pre_train.train"]
