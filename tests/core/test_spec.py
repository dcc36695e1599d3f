from __future__ import annotations

import pytest
from core_helpers import checkpointing, gke_config, local_config

from mtc_provider.core.definition.description.spec import CheckpointingSpec, RunConfig, WorkloadSpec


def test_defaults_are_the_guides_table() -> None:
    spec = CheckpointingSpec(run_name="r", base_output_directory="gs://b", steps=10)
    flags = spec.maxtext_flags()
    assert {key: flags[key] for key in list(flags)[3:]} == {
        "enable_checkpointing": True,
        "enable_emergency_checkpoint": False,
        "async_checkpointing": True,
        "local_checkpoint_period": 0,
        "checkpoint_period": 10000,
        "enable_single_replica_ckpt_restoring": False,
        "enable_autocheckpoint": False,
    }
    assert list(flags)[:3] == ["run_name", "base_output_directory", "steps"]
    # The guide's "" is MaxText's default, and MaxText 0.2.5 refuses `local_checkpoint_directory=` (read as null).
    assert spec.local_checkpoint_directory == "" and "local_checkpoint_directory" not in flags


@pytest.mark.parametrize(
    "base, expected",
    [("gs://b/out", "gs://b/out/run-1/checkpoints"), ("gs://b/out/", "gs://b/out/run-1/checkpoints"), ("/data", "/data/run-1/checkpoints")],
)
def test_checkpoint_directory(base, expected) -> None:
    assert checkpointing(base_output_directory=base).checkpoint_directory == expected


def test_run_config_from_dict_gke() -> None:
    config = RunConfig.from_dict(gke_config(workload={"command": ["python3", "train.py"]}))
    assert config.target == "gke"
    assert config.slices.hosts_per_slice == 8
    assert config.workload.command == ("python3", "train.py")
    assert config.bucket is not None and config.bucket.name == "my-bucket"


def test_run_config_from_dict_local_needs_no_cluster() -> None:
    config = RunConfig.from_dict(local_config())
    assert config.target == "local" and config.cluster is None and config.bucket is None


def test_workload_command_list_becomes_tuple() -> None:
    assert WorkloadSpec(jobset_name="j", command=["a", "b"]).command == ("a", "b")
