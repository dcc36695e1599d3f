"""What the launch takes from the plan: each section as `spec_to_dict` wrote it, validated again into the same spec
(`spec_from_dict`, one path); `mtc render` and `mtc plan` check the periods and the cross-section rules once per
description and render the flags only for the manifests."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import yaml

from mtc_provider.core.definition.render.customization import CustomizationSpec
from mtc_provider.core.definition.render.jobset_manifest import build_jobset_for_run
from mtc_provider.core.definition.description import run_checks
from mtc_provider.core.definition.description.plan import build_plan
from mtc_provider.core.definition.description.run import parse_run, run_plan
from mtc_provider.core.definition.description.spec import SECTIONS, CheckpointingSpec, spec_from_dict, spec_to_dict

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
CUSTOMIZED = {"queue_name": "q", "capacity": "spot", "tolerations": [{"key": "k", "operator": "Exists"}],
              "volumes": [{"name": "data", "configMap": {"name": "cm"}}],
              "volume_mounts": [{"name": "data", "mountPath": "/data"}], "env_from_secrets": ["s"]}


def described(path: Path, tmp_path, **extra):
    return parse_run({**yaml.safe_load(path.read_text()), **extra}, str(tmp_path / "home"))


LAUNCH_SECTIONS = ("slices", "checkpointing", "workload", "customization")


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_a_section_validated_again_is_the_validated_spec(path, tmp_path):
    config = described(path, tmp_path, customization=CUSTOMIZED)
    for name in LAUNCH_SECTIONS:
        spec = getattr(config, name)
        again = spec_from_dict(SECTIONS[name], name, spec_to_dict(spec))
        assert again == spec and type(again) is type(spec), name
    assert isinstance(spec_from_dict(CustomizationSpec, "customization",
                                     spec_to_dict(config.customization)).tolerations, tuple)


def test_the_cross_section_rules_run_once_per_description_and_plan(tmp_path, monkeypatch):
    """parse_run runs them (RunConfig keeps what they computed); run_plan and build_plan read it, not run them."""
    calls: collections.Counter = collections.Counter()
    real = run_checks.check_run
    monkeypatch.setattr("mtc_provider.core.definition.description.spec.check_run",
                        lambda *a, **k: (calls.update(["check_run"]), real(*a, **k))[1])
    config = described(EXAMPLES[0], tmp_path)
    plan = run_plan(config, str(tmp_path / "home"))
    built = build_plan(config)
    assert calls == {"check_run": 1}
    assert plan["ramdisk"] == config.checks.ramdisk.quantity == built.ramdisk.quantity


def test_mtc_render_checks_the_periods_once_and_renders_the_flags_once(tmp_path, monkeypatch):
    calls: collections.Counter = collections.Counter()
    for name in ("_check_periods", "maxtext_flags"):
        real = getattr(CheckpointingSpec, name)
        monkeypatch.setattr(CheckpointingSpec, name,
                            lambda self, _real=real, _name=name: (calls.update([_name]), _real(self))[1])
    config = described(EXAMPLES[0], tmp_path)
    assert calls == {"_check_periods": 1}  # parse_run: the cross-section rules render nothing
    build_jobset_for_run(config)
    assert calls == {"_check_periods": 1, "maxtext_flags": 1}


def test_the_spec_refuses_what_rendering_no_longer_checks():
    """Rendering writes a spec's flags as they are, so the spec refuses a local directory that is no string even
    with the local tier off (it used to fail only at rendering, naming the same field)."""
    from mtc_provider.core.basics.errors import SpecError

    with pytest.raises(SpecError, match=r"checkpointing.local_checkpoint_directory: \['/a'\] is not allowed"):
        CheckpointingSpec(run_name="r", base_output_directory="/out", steps=10, local_checkpoint_directory=["/a"])
