from __future__ import annotations

import pytest
from core_helpers import checkpointing, workload

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.render.maxtext import container_command, render_flags


@pytest.mark.parametrize(
    "flags, rendered",
    [
        ({"a": True, "b": False}, ["a=True", "b=False"]),
        ({"steps": 100, "lr": 1e-05, "name": "x"}, ["steps=100", "lr=1e-05", "name=x"]),
        ({"prompt": "hello world"}, ["prompt=hello world"]),
        ({"text": "line 1\nline 2; rm -rf /"}, ["text=line 1\nline 2; rm -rf /"]),
        ({"empty": ""}, ["empty="]),
        ({"expr": "a=b"}, ["expr=a=b"]),
        ({}, []),
    ],
)
def test_render_flags(flags, rendered) -> None:
    assert render_flags(flags) == rendered


@pytest.mark.parametrize(
    "flags, field, allowed",
    [
        ({"bad key": 1}, "flags.bad key", "MaxText config key"),
        ({"1x": 1}, "flags.1x", "MaxText config key"),
        ({"mesh": [1, 2]}, "flags.mesh", "a string, integer, float or true/false"),
        ({"none": None}, "flags.none", "a string, integer, float or true/false"),
    ],
)
def test_render_flags_rejects(flags, field, allowed) -> None:
    with pytest.raises(SpecError) as caught:
        render_flags(flags)
    assert caught.value.field == field and allowed in caught.value.allowed


def test_container_command_passes_every_flag_then_extras() -> None:
    command, args = container_command(
        checkpointing(), workload(command=("python3", "-m", "maxtext.trainers.pre_train.train", "base.yml"),
                                  extra_flags={"model_name": "llama2-7b"})
    )
    assert command == ["python3", "-m", "maxtext.trainers.pre_train.train", "base.yml"]
    assert args == [
        "run_name=run-1",
        "base_output_directory=gs://my-bucket/out",
        "steps=1000",
        "enable_checkpointing=True",
        "enable_emergency_checkpoint=True",
        "async_checkpointing=True",
        "local_checkpoint_directory=/local",
        "local_checkpoint_period=10",
        "checkpoint_period=100",
        "enable_single_replica_ckpt_restoring=False",
        "enable_autocheckpoint=False",
        "model_name=llama2-7b",
    ]
    assert not any(part in ("bash", "sh", "-c") for part in command + args)


@pytest.mark.parametrize(
    "key",
    ["run_name", "base_output_directory", "steps", "enable_checkpointing", "enable_emergency_checkpoint",
     "async_checkpointing", "local_checkpoint_directory", "local_checkpoint_period", "checkpoint_period",
     "enable_single_replica_ckpt_restoring", "enable_autocheckpoint", "enable_multi_tier_checkpointing",
     "multi_tier_checkpointing_backup_interval_minutes", "multi_tier_checkpointing_backup_interval_steps",
     "use_replicator_service"],
)
def test_extra_flags_cannot_override_checkpointing(key) -> None:
    with pytest.raises(SpecError) as caught:
        container_command(checkpointing(), workload(extra_flags={key: "x"}))
    assert caught.value.field == f"workload.extra_flags.{key}"
    assert "run_name" in caught.value.allowed and "checkpointing section" in caught.value.allowed


def test_bad_extra_flag_names_its_workload_field() -> None:
    with pytest.raises(SpecError) as caught:
        container_command(checkpointing(), workload(extra_flags={"x": {"nested": 1}}))
    assert caught.value.field == "workload.extra_flags.x"
