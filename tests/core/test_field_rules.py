"""Inputs Kubernetes, JobSet, Kueue, GKE or the GCS FUSE CSI driver refuse (or silently drop) are refused when the run
description is parsed, before any side effect, naming the field, the value and what is allowed.

One row per rule, with plain values. Each row is refused by the real system named in its comment; the provider's
rule and its source are in core.definition.description.field_rules and in docs/field-rules.md (checked below to list every field).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Callable

import pytest
from core_helpers import gke_config, run_config

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.render.checkpoint_config import build_checkpoint_configuration
from mtc_provider.core.definition.render.customization import CustomizationSpec
from mtc_provider.core.definition.description.params import cluster_setup_run
from mtc_provider.core.definition.shape.sizing import ramdisk_size
from mtc_provider.core.definition.description.spec import SECTIONS, RunConfig
from mtc_provider.core.definition.shape.tpu import SliceSpec

DOCS = Path(__file__).resolve().parents[2] / "docs" / "field-rules.md"
VOLUME = {"name": "data", "emptyDir": {}}


def custom(**fields: Any) -> RunConfig:
    """A whole run description with this customization section (the path `mtc plan` and the DAG form take)."""
    return run_config(customization=fields)


def mount(**fields: Any) -> RunConfig:
    return custom(volumes=[VOLUME], volume_mounts=[{"name": "data", "mountPath": "/data", **fields}])


def toleration(**fields: Any) -> RunConfig:
    return custom(tolerations=[fields])


def override(**spec: Any) -> RunConfig:
    return custom(jobset_override={"spec": spec})


def setup_form(**switches: Any) -> dict[str, Any]:
    return cluster_setup_run({**gke_config(), **switches}, "/tmp/mtc-home")


def gcsfuse(*options: str) -> dict[str, Any]:
    slices = SliceSpec("v6e", "4x8", 2)
    return build_checkpoint_configuration("mtc-config", "my-bucket", slices, ramdisk_size(1e9, 8),
                                          gcs_fuse_mount_options=list(options))


# (id, action, field named in the error, substrings of what is allowed)
ROWS: list[tuple[str, Callable[[], Any], str, tuple[str, ...]]] = [
    # Kubernetes ValidateVolumeMounts -> validateLocalDescendingPath: "must be a relative path", "must not contain '..'".
    ("subpath-absolute", lambda: mount(subPath="/etc"), "customization.volume_mounts[0].subPath",
     ("relative path", "validateLocalDescendingPath")),
    ("subpath-backstep", lambda: mount(subPath="logs/../../etc"), "customization.volume_mounts[0].subPath",
     ("no '..' element",)),
    ("subpathexpr-backstep", lambda: mount(subPathExpr="$(POD_NAME)/.."), "customization.volume_mounts[0].subPathExpr",
     ("no '..' element",)),
    # ValidateVolumeMounts: "subPathExpr and subPath are mutually exclusive".
    ("subpath-and-subpathexpr", lambda: mount(subPath="a", subPathExpr="$(POD_NAME)"),
     "customization.volume_mounts[0].subPathExpr", ("mutually exclusive",)),
    # validateMountPropagation: NotSupported outside None, HostToContainer, Bidirectional.
    ("mount-propagation", lambda: mount(mountPropagation="Shared"), "customization.volume_mounts[0].mountPropagation",
     ("None, HostToContainer, Bidirectional",)),
    # VolumeMount.readOnly is a boolean: the API server cannot decode a string into it.
    ("mount-readonly-text", lambda: mount(readOnly="yes"), "customization.volume_mounts[0].readOnly", ("true or false",)),
    # validateVolumeSource: an unknown key is dropped, then "must specify a volume type".
    ("unknown-volume-source", lambda: custom(volumes=[{"name": "data", "gcsFuse": {"bucket": "b"}}]),
     "customization.volumes[0].gcsFuse", ("volume source", "csi", "validateVolumeSource")),
    # ValidateTolerations: "effect must be 'NoExecute' when `tolerationSeconds` is set".
    ("toleration-seconds-on-noschedule", lambda: toleration(key="k", operator="Exists", effect="NoSchedule",
                                                             tolerationSeconds=30),
     "customization.tolerations[0].effect", ("NoExecute when tolerationSeconds is set",)),
    ("toleration-seconds-without-effect", lambda: toleration(key="k", operator="Exists", tolerationSeconds=30),
     "customization.tolerations[0].effect", ("NoExecute",)),
    # ValidateTolerations: "operator must be Exists when `key` is empty".
    ("toleration-empty-key-equal", lambda: toleration(key="", operator="Equal"), "customization.tolerations[0].operator",
     ("Exists when key is empty",)),
    # ValidateTolerations: the key is a label name (IsQualifiedName).
    ("toleration-key-with-space", lambda: toleration(key="nvidia gpu", operator="Exists"),
     "customization.tolerations[0].key", ("label key", "IsQualifiedName")),
    # ValidateTolerations: with Equal the value is a label value.
    ("toleration-value-with-space", lambda: toleration(key="k", value="a b"), "customization.tolerations[0].value",
     ("label value", "IsValidLabelValue")),
    ("toleration-seconds-text", lambda: toleration(key="k", operator="Exists", effect="NoExecute",
                                                   tolerationSeconds="30"),
     "customization.tolerations[0].tolerationSeconds", ("integer",)),
    # IsQualifiedName: the name part of a label key is at most 63 characters.
    ("node-selector-key-name-over-63", lambda: custom(node_selector={"example.com/" + "a" * 64: "x"}),
     "customization.node_selector.example.com/" + "a" * 64, ("name 1-63",)),
    # A raw Spot selector beside the capacity field: pods select Spot nodes no pool of the run has (on-demand), or
    # the provider's own selector would silently replace it (spot).
    ("raw-spot-selector-on-demand", lambda: custom(node_selector={"cloud.google.com/gke-spot": "true"}),
     "customization.node_selector.cloud.google.com/gke-spot", ("capacity: spot", "here on-demand")),
    ("raw-spot-selector-beside-spot", lambda: custom(capacity="spot", node_selector={"cloud.google.com/gke-spot": "false"}),
     "customization.node_selector.cloud.google.com/gke-spot", ("leave the label out",)),
    ("raw-preemptible-selector", lambda: custom(node_selector={"cloud.google.com/gke-preemptible": "true"}),
     "customization.node_selector.cloud.google.com/gke-preemptible", ("capacity",)),
    # IsConfigMapKey (Secret keys too): not '..' and not starting with '..'.
    ("secret-key-dotdot", lambda: custom(secret_env={"TOKEN": {"secret": "hf", "key": "..data"}}),
     "customization.secret_env.TOKEN.key", ("not starting with '..'", "IsConfigMapKey")),
    # Kueue ValidateQueueName: the queue-name label is a DNS subdomain.
    ("queue-name-upper-case", lambda: custom(queue_name="Team_A"), "customization.queue_name",
     ("DNS subdomain", "ValidateQueueName")),
    ("kueue-priority-class-upper-case", lambda: custom(kueue_priority_class="High"), "customization.kueue_priority_class",
     ("DNS subdomain",)),
    # JobSet CRD enums and minimums.
    ("startup-policy-order", lambda: override(startupPolicy={"startupPolicyOrder": "Sequential"}),
     "customization.jobset_override.spec.startupPolicy.startupPolicyOrder", ("AnyOrder or InOrder", "enum")),
    ("success-policy-operator", lambda: override(successPolicy={"operator": "Some"}),
     "customization.jobset_override.spec.successPolicy.operator", ("All or Any",)),
    ("ttl-negative", lambda: override(ttlSecondsAfterFinished=-1),
     "customization.jobset_override.spec.ttlSecondsAfterFinished", ("minimum 0",)),
    # JobSet webhook: success policy targets name replicated jobs; the network subdomain is a DNS-1035 label.
    ("success-policy-target", lambda: override(successPolicy={"operator": "All", "targetReplicatedJobs": ["workers"]}),
     "customization.jobset_override.spec.successPolicy.targetReplicatedJobs[0]", ("slice", "ReplicatedJobs")),
    ("network-subdomain", lambda: override(network={"subdomain": "1-headless"}),
     "customization.jobset_override.spec.network.subdomain", ("DNS-1035", "starting with a letter")),
    # The API server validates every object's labels, and a pod template's tolerations wherever they come from.
    ("jobset-override-label-key", lambda: custom(jobset_override={"metadata": {"labels": {"team name": "a"}}}),
     "customization.jobset_override.metadata.labels.team name", ("label key",)),
    ("pod-override-toleration", lambda: custom(pod_template_override={"spec": {"tolerations": [
        {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]}}),
     "customization.pod_template_override.spec.tolerations[0].effect", ("NoExecute",)),
    # GKE names: a cluster name starts with a letter (Container API Cluster.name).
    ("cluster-name-leading-digit", lambda: run_config(cluster={"name": "1cluster"}), "cluster.name",
     ("starting with a letter", "GKE")),
    ("cluster-location-nonsense", lambda: run_config(cluster={"location": "moon"}), "cluster.location",
     ("region or zone",)),
    # GKE node pool names: '(?:[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?)'.
    ("node-pool-prefix-leading-digit", lambda: setup_form(node_pool_prefix="1pool"), "node_pool_prefix",
     ("starting with a letter",)),
    # Kubernetes terminationGracePeriodSeconds is an int64.
    ("grace-period-over-int64", lambda: run_config(workload={"termination_grace_period_seconds": 2**63}),
     "workload.termination_grace_period_seconds", ("int64",)),
    # The provider's bound on counted restarts (JobSet takes int32; docs/field-rules.md says why 1000).
    ("max-restarts-over-bound", lambda: run_config(workload={"max_restarts": 5000}), "workload.max_restarts",
     ("<= 1000",)),
    # The GCS FUSE CSI driver discards these options and mounts without them.
    ("gcsfuse-disallowed-flag", lambda: gcsfuse("implicit-dirs", "key-file=/secrets/key.json"),
     "checkpoint_configuration.gcs_fuse_mount_options[1]", ("discards", "key-file", "disallowedFlags")),
    ("gcsfuse-disallowed-config-flag", lambda: gcsfuse("logging:log-rotate:compress:true"),
     "checkpoint_configuration.gcs_fuse_mount_options[0]", ("discards",)),
    ("gcsfuse-bool-flag-value", lambda: gcsfuse("implicit-dirs=yes"),
     "checkpoint_configuration.gcs_fuse_mount_options[0]", ("implicit-dirs=true", "boolFlags")),
]


def test_at_least_fifteen_rules() -> None:
    assert len(ROWS) >= 15


@pytest.mark.parametrize("action, field, allowed", [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_refused_naming_field_value_and_what_is_allowed(action, field, allowed) -> None:
    with pytest.raises(SpecError) as caught:
        action()
    error = caught.value
    assert error.field == field
    for text in allowed:
        assert text in error.allowed, f"{text!r} not in {error.allowed!r}"
    assert field in str(error) and repr(error.value) in str(error) and error.allowed in str(error)


def test_what_the_systems_accept_is_accepted() -> None:
    """The same fields at values Kubernetes, JobSet and Kueue accept: none of the rules over-refuses."""
    config = run_config(cluster={"name": "tpu-cluster-1", "location": "us-central1-b"}, customization={
        "capacity": "spot",
        "queue_name": "team-a.multislice",
        "kueue_priority_class": "high",
        "priority_class_name": "training.high",  # a PriorityClass name is a DNS subdomain
        "node_selector": {"example.com/pool-kind": "tpu_v6e.a", "topology.kubernetes.io/zone": "us-central1-b"},
        "tolerations": [{"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 600},
                        {"operator": "Exists"},  # an empty key with Exists tolerates every taint
                        {"key": "k", "operator": "", "value": "v", "effect": "NoSchedule"}],  # "" means Equal
        "volumes": [VOLUME, {"name": "creds", "secret": {"secretName": "gcs.creds"}}],
        "volume_mounts": [{"name": "data", "mountPath": "/data", "subPathExpr": "$(POD_NAME)/logs",
                           "mountPropagation": "HostToContainer", "readOnly": False},
                          {"name": "creds", "mountPath": "/creds", "subPath": "keys/..hidden.json"}],
        "secret_env": {"TOKEN": {"secret": "hf.token", "key": ".hf-token"}},
        "env_from_config_maps": ["run.settings"],
        "jobset_override": {"metadata": {"labels": {"example.com/team": "a"}},
                            "spec": {"startupPolicy": {"startupPolicyOrder": "InOrder"}, "ttlSecondsAfterFinished": 0,
                                     "successPolicy": {"operator": "Any", "targetReplicatedJobs": ["slice"]},
                                     "network": {"subdomain": "run-1-hosts"}}},
    }, workload={"max_restarts": 1000})
    assert config.customization.tolerations[0]["tolerationSeconds"] == 600
    assert setup_form(node_pool_prefix="a" * 36)["node_pool_prefix"] == "a" * 36
    assert gcsfuse("implicit-dirs=true", "metadata-cache:ttl-secs:-1", "read_ahead_kb=1024")["spec"][
        "gcsFuseMountOptions"][0] == "implicit-dirs=true"


def test_a_customization_built_directly_meets_the_same_rules() -> None:
    """Operators build CustomizationSpec from a dict: the same rule, the same field path."""
    with pytest.raises(SpecError) as caught:
        CustomizationSpec.from_value({"tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 1}]})
    assert caught.value.field == "customization.tolerations[0].effect"


# --- the docs table lists every field of the run description ------------------------------------------------------


def documented_fields() -> set[str]:
    rows = re.findall(r"^\| `([a-z_.]+)` \|", DOCS.read_text(), flags=re.MULTILINE)
    return set(rows)


def test_the_docs_table_lists_every_field_with_a_rule_and_a_source() -> None:
    fields = {f"{name}.{f.name}" for name, kind in SECTIONS.items() for f in dataclasses.fields(kind)}
    fields |= {f.name for f in dataclasses.fields(RunConfig) if f.name not in SECTIONS}
    missing = sorted(fields - documented_fields())
    assert not missing, f"docs/field-rules.md lacks rows for {missing}"
    for line in DOCS.read_text().splitlines():
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            assert len(cells) == 3 and all(cells), f"a row needs field, rule and source: {line}"
