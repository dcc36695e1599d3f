"""Customized JobSets (Kueue, spot, reservation, secrets, volumes, /dev/shm, overrides) are valid for the
JobSet CRDs (unknown fields rejected, see conftest.strict) and their pod templates are valid Kubernetes pods."""

from __future__ import annotations

import jsonschema
import kubernetes_validate
import pytest

from mtc_provider.core.definition.render.customization import CustomizationSpec
from mtc_provider.core.definition.render.jobset_manifest import build_jobset, pod_template
from mtc_provider.core.definition.description.spec import CheckpointingSpec, WorkloadSpec
from mtc_provider.core.definition.shape.tpu import SliceSpec

CRDS = ("jobset-crd-v0.10.1.yaml", "jobset-crd-v0.12.0.yaml")
BASE = {
    "queue_name": "multislice-queue",
    "kueue_priority_class": "high",
    "priority_class_name": "medium",
    "node_selector": {"example.com/pool-tier": "training"},
    "tolerations": [{"key": "example.com/dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
    "volumes": [{"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}},
                {"name": "tokenizer", "configMap": {"name": "tokenizer"}}],
    "volume_mounts": [{"name": "datasets", "mountPath": "/data", "readOnly": True},
                      {"name": "tokenizer", "mountPath": "/tokenizer"}],
    "secret_env": {"HF_TOKEN": {"secret": "hf", "key": "token"}},
    "config_map_env": {"DATA_MIX": {"config_map": "mix", "key": "weights"}},
    "env_from_secrets": ["wandb"],
    "env_from_config_maps": ["xla-flags"],
    "shm_size": "16Gi",
    "pod_template_override": {
        "metadata": {"annotations": {"gke-gcsfuse/volumes": "true"}},
        "spec": {"schedulerName": "default-scheduler", "imagePullSecrets": [{"name": "registry"}],
                 "containers": [{"name": "jax-tpu", "securityContext": {"privileged": True}}]},
    },
    "jobset_override": {"spec": {"ttlSecondsAfterFinished": 43200}, "metadata": {"annotations": {"team/owner": "ml"}}},
}
CASES = {
    "spot": dict(BASE, capacity="spot"),
    "reservation": dict(BASE, capacity="reservation", reservation="tpu-reservation"),
    "on-demand": dict(BASE),
}


def customized(fields: dict) -> dict:
    return build_jobset(
        SliceSpec("v5p", "2x2x2", 2),
        CheckpointingSpec("run-1", "gs://b/out", 100, enable_emergency_checkpoint=True, local_checkpoint_directory="/local",
                          local_checkpoint_period=10, checkpoint_period=50),
        WorkloadSpec("run-1", service_account="trainer"),
        {"team": "a"},
        CustomizationSpec.from_value(fields),
    )


@pytest.mark.parametrize("crd", CRDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_customized_jobset_is_valid_for_the_crd(case: str, crd: str, jobset_validators: dict) -> None:
    jobset_validators[crd].validate(customized(CASES[case]))


@pytest.mark.parametrize("case", sorted(CASES))
def test_customized_pod_template_is_a_valid_pod(case: str) -> None:
    template = pod_template(customized(CASES[case]))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "run-1-slice-0-0", **template["metadata"]},
           "spec": template["spec"]}
    kubernetes_validate.validate(pod, "1.32.0", strict=True)


def test_a_misspelt_override_is_caught_by_the_crd(jobset_validators: dict) -> None:
    """Overrides are checked against the provider-owned fields in the core; their shape is the CRD's to judge."""
    jobset = customized(dict(BASE, jobset_override={"spec": {"ttlSecondsAfterFinish": 60}}))
    with pytest.raises(jsonschema.ValidationError, match="ttlSecondsAfterFinish"):
        jobset_validators["jobset-crd-v0.12.0.yaml"].validate(jobset)
