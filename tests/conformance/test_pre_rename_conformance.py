"""Conformance of `workload.maxtext_layout: pre-rename` with the real MaxText 0.1.0 (the `MaxText` package).

MaxText 0.1.0's loader resolves `MaxText/configs/base.yml` as `src/MaxText/configs/base.yml` under the working
directory: the source tree its images are built from. The probe runs in a directory laid out that way (a
`src/MaxText` link to the installed package). Environment: scripts/maxtext_env.py, list `0.1.0` (~2.7 GB).
"""

from __future__ import annotations

from pathlib import Path

import maxtext_env
import pytest
from conftest import run_probe

from mtc_provider.core.definition.render.maxtext import container_command
from mtc_provider.core.definition.description.spec import CheckpointingSpec, WorkloadSpec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # a cold build downloads ~2.7 GB

GUIDE = {"run_name": "llama-70b", "base_output_directory": "gs://my-bucket/runs", "steps": 20000,
         "enable_emergency_checkpoint": True, "local_checkpoint_directory": "/local", "local_checkpoint_period": 100,
         "checkpoint_period": 1000, "enable_single_replica_ckpt_restoring": True}
CASES = {
    "guide-mode": GUIDE,
    "guide-mode-autocheckpoint-off": {**GUIDE, "enable_autocheckpoint": False},
    "multi-tier-minutes": {**GUIDE, "enable_emergency_checkpoint": False, "enable_multi_tier_checkpointing": True,
                           "multi_tier_checkpointing_backup_interval_minutes": 30},
}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> tuple[dict, dict]:
    try:
        python = maxtext_env.ensure_env("0.1.0")
    except maxtext_env.EnvironmentBuildError as err:
        pytest.fail(f"could not build the MaxText 0.1.0 environment (scripts/maxtext_env.py): {err}")
    [package] = Path(python).parent.parent.glob("lib/python3.*/site-packages/MaxText")
    source_tree = tmp_path_factory.mktemp("maxtext-source")
    (source_tree / "src").mkdir()
    (source_tree / "src" / "MaxText").symlink_to(package)
    cases, expected = [], {}
    for name, flags in CASES.items():
        checkpointing = CheckpointingSpec(**flags)
        command, args = container_command(checkpointing, WorkloadSpec(jobset_name="r", maxtext_layout="pre-rename"))
        assert command == ["python3", "-m", "MaxText.train", "MaxText/configs/base.yml"]
        cases.append({"name": name, "command": command, "args": args})
        keys = [arg.split("=", 1)[0] for arg in args]
        expected[name] = {key: checkpointing.maxtext_flags()[key] for key in keys}
    # What our spec refuses with pre-rename, MaxText 0.1.0 refuses too.
    cases.append({"name": "autocheckpoint-key", "command": cases[0]["command"],
                  "args": [*cases[0]["args"], "enable_autocheckpoint=False"]})
    cases.append({"name": "backup-steps-key", "command": cases[0]["command"],
                  "args": ["run_name=r", "base_output_directory=gs://b", "enable_multi_tier_checkpointing=True",
                           "local_checkpoint_directory=/local", "local_checkpoint_period=10",
                           "multi_tier_checkpointing_backup_interval_steps=20"]})
    return expected, run_probe(python, cases, source_tree)


@pytest.mark.parametrize("name", sorted(CASES))
def test_maxtext_0_1_accepts_the_pre_rename_command(results, name) -> None:
    expected, found = results
    assert found[name]["ok"], found[name].get("traceback")
    assert found[name]["values"] == expected[name]


def test_the_guides_mode_on_0_1_reads_the_mtc_init_file(results) -> None:
    _, found = results
    assert [call["call"] for call in found["guide-mode"]["distributed"]] == [
        "initialize_jax_for_tpu_with_emergency_checkpointing"]


@pytest.mark.parametrize("name, key", [("autocheckpoint-key", "enable_autocheckpoint"),
                                       ("backup-steps-key", "multi_tier_checkpointing_backup_interval_steps")])
def test_maxtext_0_1_lacks_the_keys_we_leave_out(results, name, key) -> None:
    _, found = results
    assert not found[name]["ok"]
    assert found[name]["error"] == f"ValueError: Key {key} was passed at the command line but isn't in config."
