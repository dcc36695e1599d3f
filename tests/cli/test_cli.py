"""`mtc size / plan / render`, through typer's CliRunner and once as a real `.venv/bin/mtc` process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.core.core_helpers import gke_config, local_config
from typer.testing import CliRunner

from mtc_provider.cli.app import app

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
runner = CliRunner()


def write(tmp_path: Path, data: object, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_size_prints_the_guides_walkthrough() -> None:
    result = runner.invoke(app, ["size", "--params", "70e9", "--hosts", "32"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].endswith("= 840,000,000,000 bytes = 840 GB")
    assert lines[1] == "Per-host checkpoint shard: 840 GB / 32 hosts = 26.25 GB per host"
    assert lines[2] == "Per-host ramdisk size: 26.25 GB x 2 = 52.5 GB per host"
    assert lines[3] == "With a 15% buffer: 52.5 GB x 1.15 = 60.375 GB (60,375,000,000 bytes)"
    assert lines[4].startswith("inMemoryVolumeSize: 57Gi")


def test_size_with_options() -> None:
    result = runner.invoke(app, ["size", "--params", "1e9", "--hosts", "1", "--bytes-per-param", "16", "--buffer", "0.12"])
    assert result.exit_code == 0, result.output
    assert "1,000,000,000 parameters x 16 bytes/parameter" in result.stdout
    assert "x 1.12 = 35.84 GB" in result.stdout


@pytest.mark.parametrize(
    "args, field, allowed",
    [
        (["--params", "70e9", "--hosts", "0"], "sizing.hosts_per_slice", "a positive integer"),
        (["--params", "lots", "--hosts", "32"], "sizing.parameters", "70e9"),
        (["--params", "70e9", "--hosts", "32", "--buffer", "0.5"], "sizing.buffer", "0.10 and 0.15"),
    ],
)
def test_size_errors_exit_2_on_stderr(args, field, allowed) -> None:
    result = runner.invoke(app, ["size", *args])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert field in result.stderr and allowed in result.stderr


def test_plan_prints_checks_creates_binds_and_size(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(write(tmp_path, gke_config())), "--project-number", "123456789012"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    for heading in ("Checks", "Creates", "Binds", "Ramdisk"):
        assert f"\n{heading}\n" in out
    assert "GKE version 1.32.4-gke.1415000 or later to enable MTC (later than 1.32.3-gke.1170000" in out
    assert "CheckpointConfiguration mtc-checkpoint-config (cluster-scoped): inMemoryVolumeSize 225Gi" in out
    # Both principals whole, on one line each (no terminal wrapping).
    for principal in (
        "principal://iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/my-project.svc.id.goog"
        "/subject/ns/gke-managed-checkpointing/sa/gke-checkpointing-multitier-node",
        "principal://iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/my-project.svc.id.goog"
        "/subject/ns/default/sa/default",
    ):
        assert f"roles/storage.objectUser on gs://my-bucket to {principal}\n" in out


def test_plan_without_project_number_shows_the_placeholder(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(write(tmp_path, gke_config()))])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("projects/<PROJECT_NUMBER>/") == 2


def test_plan_local_target(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(write(tmp_path, local_config()))])
    assert result.exit_code == 0, result.output
    assert "Plan for target local" in result.stdout
    assert "Not applicable locally" in result.stdout and "checkpoint-configuration: no CheckpointConfiguration" in result.stdout


@pytest.mark.parametrize("example", sorted(path.name for path in EXAMPLES.glob("*.yaml")))
def test_every_example_plans_and_renders(example: str) -> None:
    assert runner.invoke(app, ["plan", str(EXAMPLES / example)]).exit_code == 0
    result = runner.invoke(app, ["render", str(EXAMPLES / example)])
    assert result.exit_code == 0, result.output
    kinds = [doc["kind"] for doc in yaml.safe_load_all(result.stdout)]
    assert kinds == (["JobSet"] if example == "local.yaml" else ["CheckpointConfiguration", "JobSet"])


@pytest.mark.parametrize(
    "content, field, allowed",
    [
        (gke_config(bucket={"location": "us-central1-a"}), "bucket.location", "region us-central1"),
        (gke_config(slices={"topology": "4x4x"}), "slices.topology", "joined by 'x'"),
        (gke_config(checkpointing={"local_checkpoint_period": 100}), "checkpointing.local_checkpoint_period", "smaller than"),
        (gke_config(workload={"extra_flags": {"run_name": "other"}}), "workload.extra_flags.run_name", "checkpointing section"),
        ("slices: [unclosed\n", "config", "valid YAML (parse error at line"),
        ("- just\n- a list\n", "config", "a mapping"),
    ],
)
@pytest.mark.parametrize("command", ["plan", "render"])
def test_config_errors_exit_2_naming_field_value_and_allowed(tmp_path: Path, command, content, field, allowed) -> None:
    result = runner.invoke(app, [command, str(write(tmp_path, content))])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {field}:") and allowed in result.stderr


def test_missing_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["render", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "config:" in result.stderr and "nope.yaml" in result.stderr and "existing YAML" in result.stderr


def test_real_mtc_executable_renders_for_kubectl(tmp_path: Path) -> None:
    mtc = Path(sys.executable).with_name("mtc")
    assert mtc.exists(), f"console script {mtc} is not installed"
    ok = subprocess.run([str(mtc), "render", str(EXAMPLES / "gke-v6e.yaml")], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == (REPO / "tests" / "golden" / "gke-v6e.yaml").read_text()
    bad = subprocess.run(
        [str(mtc), "plan", str(write(tmp_path, gke_config(slices={"tpu_type": "v3"})))],
        capture_output=True, text=True, timeout=60,
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert "slices.tpu_type: 'v3' is not allowed; allowed: one of v4, v5e, v5p, v6e" in bad.stderr
