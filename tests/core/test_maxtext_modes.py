"""The MaxText release a command targets (workload.maxtext_layout) and MaxText's multi-tier mode.

The rules mirrored here are MaxText 0.2.5's (`maxtext/configs/types.py`, MaxTextConfig's validator); the
conformance suite (tests/conformance) runs MaxText's own config loader on what we render.
"""

from __future__ import annotations

import pytest
from core_helpers import checkpointing, gke_config, local_config, workload

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.render.maxtext import container_command, last_step, maxtext_command
from mtc_provider.core.definition.description.params import training_run
from mtc_provider.core.definition.description.spec import RunConfig

MULTI_TIER = {"enable_emergency_checkpoint": False, "enable_multi_tier_checkpointing": True,
              "multi_tier_checkpointing_backup_interval_minutes": 30}


def test_default_command_starts_the_current_release() -> None:
    assert workload().command == ("python3", "-m", "maxtext.trainers.pre_train.train", "src/maxtext/configs/base.yml")


def test_pre_rename_layout_picks_the_old_trainer() -> None:
    assert workload(maxtext_layout="pre-rename").command == ("python3", "-m", "MaxText.train", "MaxText/configs/base.yml")
    assert maxtext_command("pre-rename", "decode")[2] == "MaxText.decode"
    assert maxtext_command("current", "decode")[2] == "maxtext.inference.decode"


def test_unknown_layout_is_rejected_naming_the_choices() -> None:
    with pytest.raises(SpecError) as caught:
        workload(maxtext_layout="0.1")
    assert caught.value.field == "workload.maxtext_layout" and caught.value.value == "0.1"
    assert "current" in caught.value.allowed and "pre-rename" in caught.value.allowed


@pytest.mark.parametrize(
    "command, layout, fix",
    [
        (["python3", "-m", "MaxText.train", "MaxText/configs/base.yml"], "current", "pre-rename"),
        (["python3", "-m", "maxtext.trainers.pre_train.train"], "pre-rename", "current"),
    ],
)
def test_command_of_the_other_layout_is_a_contradiction(command, layout, fix) -> None:
    """`python3 -m MaxText.train` on MaxText 0.2.5 exits with `No module named 'MaxText'`."""
    with pytest.raises(SpecError) as caught:
        workload(command=command, maxtext_layout=layout)
    assert caught.value.field == "workload.command" and f"maxtext_layout: {fix}" in caught.value.allowed


def test_commands_that_are_not_maxtext_modules_pass_either_layout() -> None:
    assert workload(command=["python", "train.py"]).command == ("python", "train.py")
    assert workload(command=["python", "-m", "mtc_local.workload"], maxtext_layout="pre-rename").command[2] == (
        "mtc_local.workload")


def test_multi_tier_renders_its_flags_and_mounts_the_ramdisk() -> None:
    spec = checkpointing(**MULTI_TIER, use_replicator_service=True)
    _, args = container_command(spec, workload())
    assert args[-3:] == ["enable_multi_tier_checkpointing=True", "multi_tier_checkpointing_backup_interval_minutes=30",
                         "use_replicator_service=True"]
    assert "enable_emergency_checkpoint=False" in args
    assert spec.local_tier == "enable_multi_tier_checkpointing"


def test_the_guide_mode_renders_no_multi_tier_flag() -> None:
    _, args = container_command(checkpointing(), workload())
    assert not [arg for arg in args if "multi_tier" in arg or "replicator" in arg]


@pytest.mark.parametrize(
    "overrides, field, allowed",
    [
        ({"multi_tier_checkpointing_backup_interval_minutes": None}, "checkpointing.multi_tier_checkpointing_backup_interval_minutes",
         "exactly one of"),
        ({"multi_tier_checkpointing_backup_interval_steps": 20}, "checkpointing.multi_tier_checkpointing_backup_interval_minutes",
         "exactly one of"),
        ({"multi_tier_checkpointing_backup_interval_minutes": None, "multi_tier_checkpointing_backup_interval_steps": 5},
         "checkpointing.multi_tier_checkpointing_backup_interval_steps", ">= local_checkpoint_period (10)"),
        ({"multi_tier_checkpointing_backup_interval_minutes": 0}, "checkpointing.multi_tier_checkpointing_backup_interval_minutes",
         "a positive integer"),
        ({"local_checkpoint_period": 0}, "checkpointing.local_checkpoint_period", "> 0"),
        ({"local_checkpoint_directory": ""}, "checkpointing.local_checkpoint_directory", "absolute path"),
        ({"enable_emergency_checkpoint": True}, "checkpointing.enable_emergency_checkpoint", "one local-checkpoint mode"),
        ({"enable_checkpointing": False}, "checkpointing.enable_checkpointing", "enable_multi_tier_checkpointing"),
        ({"use_replicator_service": "yes"}, "checkpointing.use_replicator_service", "true or false"),
    ],
)
def test_multi_tier_rules(overrides, field, allowed) -> None:
    with pytest.raises(SpecError) as caught:
        checkpointing(**{**MULTI_TIER, **overrides})
    assert caught.value.field == field and allowed in caught.value.allowed


def test_backup_steps_equal_to_the_local_period_are_allowed() -> None:
    spec = checkpointing(**{**MULTI_TIER, "multi_tier_checkpointing_backup_interval_minutes": None,
                            "multi_tier_checkpointing_backup_interval_steps": 10})
    assert spec.maxtext_flags()["multi_tier_checkpointing_backup_interval_steps"] == 10


@pytest.mark.parametrize("key, value", [("multi_tier_checkpointing_backup_interval_minutes", 5),
                                        ("multi_tier_checkpointing_backup_interval_steps", 50),
                                        ("use_replicator_service", True)])
def test_multi_tier_settings_without_the_mode_are_rejected(key, value) -> None:
    with pytest.raises(SpecError) as caught:
        checkpointing(**{key: value})
    assert caught.value.field == f"checkpointing.{key}" and "enable_multi_tier_checkpointing" in caught.value.allowed


@pytest.mark.parametrize("key, value", [("multi_tier_checkpointing_backup_interval_steps", 20),
                                        ("use_replicator_service", True)])
def test_pre_rename_images_lack_the_newer_multi_tier_keys(key, value) -> None:
    extra = {"multi_tier_checkpointing_backup_interval_minutes": None} if key.endswith("steps") else {}
    spec = checkpointing(**{**MULTI_TIER, **extra, key: value})
    with pytest.raises(SpecError) as caught:
        container_command(spec, workload(maxtext_layout="pre-rename"))
    assert caught.value.field == f"checkpointing.{key}" and "pre-rename" in caught.value.allowed
    assert container_command(checkpointing(**MULTI_TIER), workload(maxtext_layout="pre-rename"))[0][2] == "MaxText.train"


def test_multi_tier_on_the_local_target_needs_the_light_workload() -> None:
    """The JAX workload has no multi-tier mode (it refuses the flag); the light one saves only its local tier and the
    runner's replicator backs it up (mtc_local.runner.replicator)."""
    with pytest.raises(SpecError) as caught:
        RunConfig.from_dict(local_config(checkpointing=MULTI_TIER))
    assert caught.value.field == "checkpointing.enable_multi_tier_checkpointing" and "light" in caught.value.allowed
    light = local_config(checkpointing=MULTI_TIER)
    light["workload"] = {**light.get("workload", {}), "command": ["python", "-m", "mtc_local.light_workload"]}
    assert RunConfig.from_dict(light).checkpointing.enable_multi_tier_checkpointing
    assert RunConfig.from_dict(gke_config(checkpointing=MULTI_TIER)).checkpointing.enable_multi_tier_checkpointing


def test_dag_form_takes_the_multi_tier_mode_and_the_layout() -> None:
    from tests.core.core_helpers import GKE_IMAGE, form

    checkpointing = {"local_checkpoint_directory": "/local", "local_checkpoint_period": 5,
                     "enable_emergency_checkpoint": False, "enable_multi_tier_checkpointing": True,
                     "multi_tier_checkpointing_backup_interval_steps": 10}
    gke = form("gke", steps=100, checkpointing=checkpointing,
               workload={"maxtext_layout": "pre-rename", "image": GKE_IMAGE})
    with pytest.raises(SpecError) as caught:  # MaxText 0.1 has no backup-interval-steps key
        training_run(gke, "/unused")
    assert caught.value.field == "checkpointing.multi_tier_checkpointing_backup_interval_steps"
    run = training_run({**gke, "workload": {"maxtext_layout": "current", "image": GKE_IMAGE}}, "/unused")
    assert run["checkpointing"]["multi_tier_checkpointing_backup_interval_steps"] == 10
    assert run["workload"]["command"][2] == "maxtext.trainers.pre_train.train"
    with pytest.raises(SpecError) as caught:
        training_run(form("local", steps=100, checkpointing=checkpointing), "/tmp/home")
    assert caught.value.field == "checkpointing.enable_multi_tier_checkpointing"



def test_empty_values_are_never_rendered() -> None:
    """OmegaConf reads `key=` as null: MaxText 0.2.5 refuses `local_checkpoint_directory=` (tests/conformance)."""
    spec = checkpointing(enable_emergency_checkpoint=False, local_checkpoint_directory="", local_checkpoint_period=0)
    _, args = container_command(spec, workload())
    assert not [arg for arg in args if arg.endswith("=")]
    with pytest.raises(SpecError) as caught:
        container_command(spec, workload(extra_flags={"tokenizer_path": ""}))
    assert caught.value.field == "workload.extra_flags.tokenizer_path" and "null" in caught.value.allowed
    with pytest.raises(SpecError) as caught:
        container_command(spec, workload(extra_flags={"local_checkpoint_directory": "/x"}))
    assert caught.value.field == "workload.extra_flags.local_checkpoint_directory"


def test_a_maxtext_run_ends_at_step_steps_minus_one() -> None:
    """MaxText 0.2.5 with steps=6 saves 0, 2, 4, 5 (tests/conformance/test_real_maxtext_cpu.py)."""
    from tests.core.core_helpers import form

    gke = training_run(form("gke"), "/unused")
    local = training_run(form("local"), "/tmp/home")
    assert (gke["target_step"], local["target_step"]) == (69, 70)
    assert last_step(checkpointing(steps=6), workload(maxtext_layout="pre-rename")) == 5
    assert last_step(checkpointing(steps=6), workload(command=["python", "train.py"])) == 6


def test_pre_rename_leaves_out_autocheckpoint_when_false() -> None:
    """MaxText 0.1.0 refuses `enable_autocheckpoint` (not in its base.yml; tests/conformance); false is the default."""
    _, args = container_command(checkpointing(), workload(maxtext_layout="pre-rename"))
    assert not [arg for arg in args if arg.startswith("enable_autocheckpoint=")] and len(args) == 10
    _, args = container_command(checkpointing(enable_autocheckpoint=True), workload(maxtext_layout="pre-rename"))
    assert args[-1] == "enable_autocheckpoint=True"
    _, args = container_command(checkpointing(), workload())
    assert "enable_autocheckpoint=False" in args
