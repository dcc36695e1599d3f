"""Small builders for valid specs, so each test changes only the value it is about."""

from __future__ import annotations

import copy
from typing import Any

from mtc_provider.core.definition.description.spec import CheckpointingSpec, RunConfig, WorkloadSpec
from mtc_provider.core.definition.shape.tpu import SliceSpec

GKE_CONFIG: dict[str, Any] = {
    "target": "gke",
    "cluster": {"project_id": "my-project", "location": "us-central1", "name": "tpu-cluster"},
    "bucket": {"name": "my-bucket", "location": "us-central1"},
    "slices": {"tpu_type": "v6e", "topology": "4x8", "num_slices": 2},
    "sizing": {"parameters": "70e9"},
    "checkpointing": {
        "run_name": "run-1",
        "base_output_directory": "gs://my-bucket/out",
        "steps": 1000,
        "enable_emergency_checkpoint": True,
        "local_checkpoint_directory": "/local",
        "local_checkpoint_period": 10,
        "checkpoint_period": 100,
    },
    "workload": {"jobset_name": "run-1"},
}


def gke_config(**sections: dict[str, Any]) -> dict[str, Any]:
    """GKE_CONFIG with the given sections' keys replaced (a value of None deletes the key)."""
    data = copy.deepcopy(GKE_CONFIG)
    for section, values in sections.items():
        if not isinstance(values, dict):
            data[section] = values
            continue
        target = data.setdefault(section, {})
        for key, value in values.items():
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value
    return data


def local_config(**sections: dict[str, Any]) -> dict[str, Any]:
    data = gke_config(**sections)
    data["target"] = "local"
    data.pop("cluster")
    data.pop("bucket")
    data["checkpointing"]["base_output_directory"] = sections.get("checkpointing", {}).get(
        "base_output_directory", "/tmp/mtc/out"
    )
    return data


def run_config(**sections: dict[str, Any]) -> RunConfig:
    return RunConfig.from_dict(gke_config(**sections))


def checkpointing(**overrides: Any) -> CheckpointingSpec:
    values = dict(GKE_CONFIG["checkpointing"], **overrides)
    return CheckpointingSpec(**values)


def workload(**overrides: Any) -> WorkloadSpec:
    return WorkloadSpec(**dict({"jobset_name": "run-1"}, **overrides))


def slices(**overrides: Any) -> SliceSpec:
    return SliceSpec(**dict(GKE_CONFIG["slices"], **overrides))


SLICES = {"tpu_type": "v6e", "topology": "", "num_slices": 2}
GKE_CLUSTER = {"project_id": "my-project", "location": "us-central1", "name": "c"}
GKE_IMAGE = "us-docker.pkg.dev/p/r/maxtext:1"


def form(target: str = "local", run_name: str = "r", steps: int = 70, **sections: Any) -> dict[str, Any]:
    """A training DAG form (the run description's sections, core.definition.description.run): the slices and a run, on `target`;
    sections given are laid over (checkpointing's run_name and steps are kept unless given)."""
    described: dict[str, Any] = {"target": target, "slices": dict(SLICES),
                                 "checkpointing": {"run_name": run_name, "steps": steps}, "workload": {}}
    if target == "gke":
        described |= {"cluster": dict(GKE_CLUSTER), "bucket": {"name": "mtc-checkpoints"}, "workload": {"image": GKE_IMAGE}}
    for name, value in sections.items():
        base = described.get(name)
        described[name] = {**base, **value} if isinstance(base, dict) and isinstance(value, dict) else value
    return described
