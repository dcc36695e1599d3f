from __future__ import annotations

import json

import pytest
from core_helpers import checkpointing, run_config, slices, workload

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.render.jobset_manifest import (
    DONT_RETRY_EXIT_CODES,
    FAIL_ON_BUG_RULE,
    MTC_CSI_DRIVER,
    RETRYABLE_EXIT_CODES,
    build_jobset,
    build_jobset_for_run,
    pod_template,
)
from mtc_provider.core.definition.shape.tpu import SliceSpec


def job_spec(jobset: dict) -> dict:
    return jobset["spec"]["replicatedJobs"][0]["template"]["spec"]


def test_exit_code_convention_is_xpks() -> None:
    assert RETRYABLE_EXIT_CODES == (42, *range(127, 256))
    assert set(RETRYABLE_EXIT_CODES).isdisjoint(DONT_RETRY_EXIT_CODES)
    assert set(RETRYABLE_EXIT_CODES) | set(DONT_RETRY_EXIT_CODES) == set(range(1, 256))
    assert 0 not in DONT_RETRY_EXIT_CODES


@pytest.mark.parametrize("code, retryable", [(42, True), (137, True), (143, True), (255, True), (1, False), (2, False), (126, False), (43, False)])
def test_the_rendered_pod_failure_policy_retries_exactly_the_retryable_codes(code, retryable) -> None:
    """The used path: the JobSet's podFailurePolicy fails the Job (no retry) on every code NotIn its values."""
    rule = job_spec(build_jobset(slices(), checkpointing(), workload()))["podFailurePolicy"]["rules"][1]
    assert rule["onExitCodes"]["operator"] == "NotIn" and rule["action"] == "FailJob"
    assert (code in rule["onExitCodes"]["values"]) is retryable


def test_failure_policies() -> None:
    jobset = build_jobset(slices(), checkpointing(), workload(max_restarts=7))
    assert jobset["spec"]["failurePolicy"] == {
        "maxRestarts": 7,
        "restartStrategy": "Recreate",
        "rules": [
            # a disruption (the pod failure policy's rule 0, named in the Job's failure message) restarts every
            # slice without counting against maxRestarts (JobSet docs "Failure Policy", host-maintenance-event-model)
            {"name": "RestartOnDisruption", "action": "RestartJobSetAndIgnoreMaxRestarts",
             "onJobFailureReasons": ["PodFailurePolicy"],
             "onJobFailureMessagePatterns": ["has condition DisruptionTarget matching FailJob rule"]},
            {"name": FAIL_ON_BUG_RULE, "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
    }
    disruption, rule = job_spec(jobset)["podFailurePolicy"]["rules"]
    assert disruption == {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert job_spec(jobset)["template"]["spec"]["restartPolicy"] == "Never"  # Kubernetes requires it for the policy
    assert rule["action"] == "FailJob"
    assert rule["onExitCodes"] == {"containerName": "jax-tpu", "operator": "NotIn", "values": list(RETRYABLE_EXIT_CODES)}
    # Kubernetes: a set of at most 255 values, ordered, no duplicates.
    values = rule["onExitCodes"]["values"]
    assert len(values) <= 255 and values == sorted(set(values))


@pytest.mark.parametrize(
    "spec, replicas, hosts, chips",
    [(SliceSpec("v6e", "4x8", 2), 2, 8, 4), (SliceSpec("v5p", "2x2x2", 4), 4, 2, 4), (SliceSpec("v6e", "2x4", 3, "ct6e-standard-8t"), 3, 1, 8)],
)
def test_shape_follows_the_slices(spec, replicas, hosts, chips) -> None:
    jobset = build_jobset(spec, checkpointing(), workload())
    job = jobset["spec"]["replicatedJobs"][0]
    assert job["replicas"] == replicas
    assert (job_spec(jobset)["parallelism"], job_spec(jobset)["completions"]) == (hosts, hosts)
    assert job_spec(jobset)["backoffLimit"] == 0 and job_spec(jobset)["completionMode"] == "Indexed"
    pod = pod_template(jobset)["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"google.com/tpu": chips}
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == spec.topology


def test_pod_spec_for_tpu_multislice() -> None:
    jobset = build_jobset(slices(), checkpointing(), workload(service_account="trainer", termination_grace_period_seconds=120))
    assert jobset["metadata"]["annotations"] == {"alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
    pod = pod_template(jobset)["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["serviceAccountName"] == "trainer" and pod["terminationGracePeriodSeconds"] == 120
    assert pod["tolerations"] == [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice", "cloud.google.com/gke-tpu-topology": "4x8"}


def test_mtc_ramdisk_volume_when_emergency_checkpointing() -> None:
    pod = pod_template(build_jobset(slices(), checkpointing(local_checkpoint_directory="/mtc"), workload()))["spec"]
    assert pod["volumes"] == [{"name": "mtc-ramdisk", "csi": {"driver": MTC_CSI_DRIVER}}]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "mtc-ramdisk", "mountPath": "/mtc"}]
    assert MTC_CSI_DRIVER == "multitier-checkpoint.csi.storage.gke.io"


def test_no_ramdisk_without_emergency_checkpointing() -> None:
    spec = checkpointing(enable_emergency_checkpoint=False, local_checkpoint_directory="", local_checkpoint_period=0)
    pod = pod_template(build_jobset(slices(), spec, workload()))["spec"]
    assert "volumes" not in pod and "volumeMounts" not in pod["containers"][0]


def test_labels_on_jobset_and_pods() -> None:
    jobset = build_jobset(slices(), checkpointing(), workload(namespace="ml"), labels={"team": "research"})
    assert jobset["metadata"]["namespace"] == "ml"
    assert jobset["metadata"]["labels"]["team"] == "research"
    assert jobset["metadata"]["labels"]["mtc.airflow.apache.org/run-name"] == "run-1"
    assert pod_template(jobset)["metadata"]["labels"] == jobset["metadata"]["labels"]


@pytest.mark.parametrize(
    "labels, allowed",
    [({"team": "a b"}, "label value"), ({"bad key!": "x"}, "label key"), ({"team": "x" * 64}, "at most 63")],
)
def test_bad_labels(labels, allowed) -> None:
    with pytest.raises(SpecError) as caught:
        build_jobset(slices(), checkpointing(), workload(), labels=labels)
    assert caught.value.field.startswith("labels.") and allowed in caught.value.allowed


def test_env_has_jobset_identity_then_workload_env() -> None:
    env = pod_template(build_jobset(slices(), checkpointing(), workload(env={"XLA_FLAGS": "--xla_dump_to=/tmp"})))["spec"][
        "containers"
    ][0]["env"]
    names = [item["name"] for item in env]
    assert names == ["JOBSET_NAME", "REPLICATED_JOB_NAME", "JOB_INDEX", "JOBSET_RESTART_ATTEMPT", "XLA_FLAGS"]
    assert env[0]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.annotations['jobset.sigs.k8s.io/jobset-name']"
    assert env[-1] == {"name": "XLA_FLAGS", "value": "--xla_dump_to=/tmp"}


@pytest.mark.parametrize(
    "env, field, allowed",
    [
        ({"JOB_INDEX": "3"}, "workload.env.JOB_INDEX", "other than the ones the provider sets"),
        ({"1BAD": "x"}, "workload.env.1BAD", "environment variable name"),
        ({"N": 3}, "workload.env.N", "a string"),
    ],
)
def test_bad_env(env, field, allowed) -> None:
    with pytest.raises(SpecError) as caught:
        build_jobset(slices(), checkpointing(), workload(env=env))
    assert caught.value.field == field and allowed in caught.value.allowed


def test_deterministic_and_free_of_mount_options() -> None:
    config = run_config()
    first, second = build_jobset_for_run(config), build_jobset_for_run(config)
    assert json.dumps(first) == json.dumps(second)
    assert list(first) == ["apiVersion", "kind", "metadata", "spec"]
    assert "mountOptions" not in json.dumps(first)


def test_container_gets_command_and_args_separately() -> None:
    container = pod_template(build_jobset_for_run(run_config()))["spec"]["containers"][0]
    assert container["command"] == ["python3", "-m", "maxtext.trainers.pre_train.train", "src/maxtext/configs/base.yml"]
    assert container["args"][:2] == ["run_name=run-1", "base_output_directory=gs://my-bucket/out"]
