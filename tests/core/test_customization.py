"""JobSet customization: Kueue, capacity, volumes, env from Secrets/ConfigMaps, /dev/shm, overrides (pure)."""

from __future__ import annotations

import json

import pytest
from core_helpers import checkpointing, gke_config, slices, workload

from mtc_provider.core.definition.render.customization import CustomizationSpec, merge
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.render.jobset_manifest import build_jobset, pod_template
from mtc_provider.core.definition.description.spec import RunConfig

FULL = {
    "queue_name": "multislice-queue",
    "kueue_priority_class": "high",
    "priority_class_name": "medium",
    "capacity": "spot",
    "node_selector": {"example.com/pool-tier": "training"},
    "tolerations": [{"key": "example.com/dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
    "volumes": [{"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets"}}],
    "volume_mounts": [{"name": "datasets", "mountPath": "/data", "readOnly": True}],
    "secret_env": {"HF_TOKEN": {"secret": "hf", "key": "token"}},
    "config_map_env": {"DATA_MIX": {"config_map": "mix", "key": "weights"}},
    "env_from_secrets": ["wandb"],
    "env_from_config_maps": ["xla-flags"],
    "shm_size": "16Gi",
}


def custom(**fields) -> CustomizationSpec:
    return CustomizationSpec.from_value(fields)


def render(customization: CustomizationSpec, **wl) -> dict:
    return build_jobset(slices(), checkpointing(), workload(**wl), {"team": "a"}, customization)


def main_container(jobset: dict) -> dict:
    return pod_template(jobset)["spec"]["containers"][0]


def test_nothing_customized_renders_exactly_as_before() -> None:
    assert render(CustomizationSpec()) == build_jobset(slices(), checkpointing(), workload(), {"team": "a"})


def test_kueue_labels_on_the_jobset_and_priority_class_on_the_pods() -> None:
    jobset = render(custom(queue_name="multislice-queue", kueue_priority_class="high", priority_class_name="medium"))
    labels = jobset["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "multislice-queue"
    assert labels["kueue.x-k8s.io/priority-class"] == "high"
    assert pod_template(jobset)["spec"]["priorityClassName"] == "medium"


def test_spot_capacity_selects_and_tolerates_spot_nodes_as_gke_documents() -> None:
    # GKE: Spot nodes carry cloud.google.com/gke-spot=true; the cloud.google.com/gke-spot=true:NoSchedule taint
    # is tolerated (cloud.google.com/kubernetes-engine/docs/how-to/spot-vms).
    pod = pod_template(render(custom(capacity="spot")))["spec"]
    assert pod["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "4x8"  # the TPU selectors stay
    assert {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"} \
        in pod["tolerations"]
    assert {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]


def test_reservation_capacity_selects_the_specific_reservation() -> None:
    # GKE: consuming-reservations, "Consume a specific reservation" through nodeSelectors.
    pod = pod_template(render(custom(capacity="reservation", reservation="tpu-res-1")))["spec"]
    assert pod["nodeSelector"]["cloud.google.com/reservation-name"] == "tpu-res-1"
    assert pod["nodeSelector"]["cloud.google.com/reservation-affinity"] == "specific"
    assert "cloud.google.com/gke-spot" not in pod["nodeSelector"]


def test_secrets_are_referenced_never_inlined() -> None:
    container = main_container(render(custom(secret_env={"HF_TOKEN": {"secret": "hf", "key": "token"}},
                                             env_from_secrets=["wandb"])))
    assert container["env"][-1] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    assert container["envFrom"] == [{"secretRef": {"name": "wandb"}}]


def test_a_secret_value_is_refused_where_a_reference_is_expected() -> None:
    with pytest.raises(SpecError) as caught:
        custom(secret_env={"HF_TOKEN": "hf_abcdefghijklmnop"})
    assert caught.value.field == "customization.secret_env.HF_TOKEN"
    assert "never the value itself" in caught.value.allowed


def test_sized_shm_is_a_memory_empty_dir_like_xpks() -> None:
    jobset = render(custom(shm_size="16Gi"))
    pod = pod_template(jobset)["spec"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in main_container(jobset)["volumeMounts"]
    # The MTC ramdisk stays.
    assert {"name": "mtc-ramdisk", "mountPath": "/local"} in main_container(jobset)["volumeMounts"]


def test_extra_volumes_and_mounts() -> None:
    jobset = render(custom(**{k: FULL[k] for k in ("volumes", "volume_mounts")}))
    assert pod_template(jobset)["spec"]["volumes"][-1] == FULL["volumes"][0]
    assert main_container(jobset)["volumeMounts"][-1] == FULL["volume_mounts"][0]


def test_service_account_is_the_workloads() -> None:
    assert pod_template(render(CustomizationSpec(), service_account="trainer"))["spec"]["serviceAccountName"] == "trainer"


@pytest.mark.parametrize(
    "fields, field, allowed",
    [
        ({"capacity": "preemptible"}, "customization.capacity", "on-demand, spot, reservation"),
        ({"capacity": "reservation"}, "customization.reservation", "reservation's name"),
        ({"reservation": "r1"}, "customization.reservation", "unless capacity is reservation"),
        ({"queue_name": "bad queue"}, "customization.queue_name", "label value"),
        ({"priority_class_name": "Medium"}, "customization.priority_class_name", "lower-case"),
        ({"shm_size": "lots"}, "customization.shm_size", "quantity"),
        ({"node_selector": {"bad key!": "x"}}, "customization.node_selector.bad key!", "label key"),
        ({"tolerations": [{"key": "k", "operator": "Maybe"}]}, "customization.tolerations[0].operator", "Exists or Equal"),
        ({"tolerations": [{"operator": "Exists", "value": "v"}]}, "customization.tolerations[0].value", "empty"),
        ({"volumes": [{"name": "v"}]}, "customization.volumes[0]", "exactly one source"),
        ({"volume_mounts": [{"name": "nope", "mountPath": "/x"}]}, "customization.volume_mounts[0].name", "one of"),
        ({"volumes": [{"name": "v", "emptyDir": {}}], "volume_mounts": [{"name": "v", "mountPath": "rel"}]},
         "customization.volume_mounts[0].mountPath", "absolute"),
        ({"secret_env": {"1X": {"secret": "s", "key": "k"}}}, "customization.secret_env.1X", "variable name"),
        ({"config_map_env": {"X": {"secret": "s", "key": "k"}}}, "customization.config_map_env.X", "config_map"),
        ({"env_from_secrets": ["Bad_Name"]}, "customization.env_from_secrets[0]", "lower-case"),
        ({"jobset_override": {"kind": "Job"}}, "customization.jobset_override.kind", "metadata or spec"),
        ({"jobset_override": {"spec": {"ttlSecondsAfterFinished": None}}},
         "customization.jobset_override.spec.ttlSecondsAfterFinished", "cannot delete"),
        ({"colour": "blue"}, "customization.colour", "one of"),
    ],
)
def test_bad_customization_names_field_and_allowed(fields, field, allowed) -> None:
    with pytest.raises(SpecError) as caught:
        custom(**fields)
    assert caught.value.field == field
    assert allowed in caught.value.allowed


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"node_selector": {"cloud.google.com/gke-tpu-topology": "2x2"}},
         "customization.node_selector.cloud.google.com/gke-tpu-topology"),
        ({"volumes": [{"name": "mtc-ramdisk", "emptyDir": {}}]}, "customization.volumes[0].name"),
        ({"volumes": [{"name": "v", "emptyDir": {}}], "volume_mounts": [{"name": "v", "mountPath": "/local"}]},
         "customization.volume_mounts[0].mountPath"),
        ({"secret_env": {"JOBSET_NAME": {"secret": "s", "key": "k"}}}, "customization.secret_env.JOBSET_NAME"),
    ],
)
def test_fields_the_provider_sets_cannot_be_claimed(fields, field) -> None:
    with pytest.raises(SpecError) as caught:
        render(custom(**fields))
    assert caught.value.field == field


def test_pod_template_override_merges_into_every_pod_template() -> None:
    override = {
        "metadata": {"annotations": {"gke-gcsfuse/volumes": "true"}},
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [{"name": "jax-tpu", "securityContext": {"privileged": True},
                            "env": [{"name": "EXTRA", "value": "1"}]}],
        },
    }
    jobset = render(custom(pod_template_override=override))
    template = pod_template(jobset)
    assert template["metadata"]["annotations"] == {"gke-gcsfuse/volumes": "true"}
    assert template["metadata"]["labels"]["team"] == "a"
    assert template["spec"]["schedulerName"] == "default-scheduler"
    container = main_container(jobset)
    assert container["securityContext"] == {"privileged": True}
    assert [e["name"] for e in container["env"]][-1] == "EXTRA" and container["env"][0]["name"] == "JOBSET_NAME"
    assert len(template["spec"]["containers"]) == 1  # merged by name, not appended


def test_jobset_override_merges_like_full_job_spec() -> None:
    jobset = render(custom(jobset_override={"spec": {"ttlSecondsAfterFinished": 43200, "suspend": True},
                                            "metadata": {"annotations": {"team/owner": "ml"}}}))
    assert jobset["spec"]["ttlSecondsAfterFinished"] == 43200 and jobset["spec"]["suspend"] is True
    assert jobset["metadata"]["annotations"]["team/owner"] == "ml"
    assert jobset["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"]


@pytest.mark.parametrize(
    "where, override, path",
    [
        ("jobset_override", {"spec": {"failurePolicy": {"maxRestarts": 99}}}, "spec.failurePolicy"),
        ("jobset_override", {"metadata": {"name": "other"}}, "metadata.name"),
        ("jobset_override", {"metadata": {"labels": {"mtc.airflow.apache.org/run-name": "x"}}},
         "metadata.labels.mtc.airflow.apache.org/run-name"),
        ("jobset_override", {"spec": {"replicatedJobs": [{"name": "slice", "replicas": 9}]}},
         "spec.replicatedJobs[slice].replicas"),
        ("jobset_override", {"spec": {"replicatedJobs": [{"name": "extra", "replicas": 1}]}},
         "spec.replicatedJobs[*].name"),
        ("pod_template_override", {"spec": {"containers": [{"name": "jax-tpu", "args": ["steps=1"]}]}},
         "spec.replicatedJobs[slice].template.spec.containers[jax-tpu].args"),
        ("pod_template_override", {"spec": {"volumes": [{"name": "mtc-ramdisk", "emptyDir": {}}]}},
         "spec.replicatedJobs[slice].template.spec.volumes[mtc-ramdisk]"),
        ("pod_template_override",
         {"spec": {"containers": [{"name": "jax-tpu", "volumeMounts": [{"name": "mtc-ramdisk", "mountPath": "/local",
                                                                         "readOnly": True}]}]}},
         "spec.replicatedJobs[slice].template.spec.containers[jax-tpu].volumeMounts[mtc-ramdisk]"),
        ("pod_template_override", {"spec": {"nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice"}}},
         "spec.replicatedJobs[slice].template.spec.nodeSelector.cloud.google.com/gke-tpu-accelerator"),
    ],
)
def test_overrides_that_touch_provider_owned_fields_are_refused(where, override, path) -> None:
    with pytest.raises(SpecError) as caught:
        render(custom(**{where: override}))
    assert caught.value.field == f"customization.{where}: {path}"
    assert "owned by the provider" in caught.value.allowed


def test_merge_keys_follow_strategic_merge() -> None:
    base = {"volumeMounts": [{"name": "a", "mountPath": "/a"}], "tolerations": [{"key": "x"}]}
    merged = merge(base, {"volumeMounts": [{"name": "b", "mountPath": "/a", "readOnly": True}],
                          "tolerations": [{"key": "y"}]})
    assert merged["volumeMounts"] == [{"name": "b", "mountPath": "/a", "readOnly": True}]
    assert merged["tolerations"] == [{"key": "y"}]  # no merge key: replaced
    assert base["volumeMounts"] == [{"name": "a", "mountPath": "/a"}]  # inputs untouched


def test_run_description_section_renders_through_build_jobset_for_run() -> None:
    config = RunConfig.from_dict(gke_config(customization=dict(FULL)))
    from mtc_provider.core.definition.render.jobset_manifest import build_jobset_for_run

    jobset = build_jobset_for_run(config)
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "multislice-queue"
    assert "hf" in json.dumps(jobset) and "secretKeyRef" in json.dumps(jobset)


def test_bad_section_in_a_run_description() -> None:
    with pytest.raises(SpecError) as caught:
        RunConfig.from_dict(gke_config(customization={"capacity": "cheap"}))
    assert caught.value.field == "customization.capacity"


def test_training_dag_form_carries_a_validated_customization() -> None:
    from mtc_provider.core.definition.description.params import training_run

    from tests.core.core_helpers import form

    planned = training_run(form(run_name="r1", customization={"queue_name": "q", "capacity": "spot"}), "/tmp/mtc-home")
    assert planned["customization"]["queue_name"] == "q"
    assert CustomizationSpec.from_value(planned["customization"]) == custom(queue_name="q", capacity="spot")
    as_xcom = json.loads(json.dumps(planned["customization"]))  # what the next task reads back
    assert CustomizationSpec.from_value(as_xcom) == custom(queue_name="q", capacity="spot")
    with pytest.raises(SpecError) as caught:
        training_run(form(run_name="r1", customization={"capacity": "cheap"}), "/tmp/mtc-home")
    assert caught.value.field == "customization.capacity"
