"""`mtc --version`, `--output json|yaml` for plan and size, `-` for stdin, and size from --tpu-type/--topology."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tests.core.core_helpers import gke_config
from typer.testing import CliRunner

from mtc_provider import __version__
from mtc_provider.cli.app import app

runner = CliRunner()


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout == f"mtc {__version__}\n"


@pytest.mark.parametrize(
    "tpu_type, topology, machine_type, hosts",
    [("v5p", "2x2x2", "", 2), ("v6e", "4x8", "", 8), ("v6e", "2x4", "ct6e-standard-8t", 1), ("v5e", "16x16", "", 64)],
)
def test_size_derives_the_host_count_from_tpu_type_and_topology(tpu_type, topology, machine_type, hosts) -> None:
    # 8e9 parameters fit every host here (a derived machine type is also checked against its host memory).
    args = ["size", "--params", "8e9", "--tpu-type", tpu_type, "--topology", topology, "-o", "json"]
    result = runner.invoke(app, args + (["--machine-type", machine_type] if machine_type else []))
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["hosts_per_slice"] == data["slices"]["hosts_per_slice"] == hosts
    by_hosts = json.loads(runner.invoke(app, ["size", "--params", "8e9", "--hosts", str(hosts), "-o", "json"]).stdout)
    assert by_hosts["total_bytes"] == data["total_bytes"]


def test_size_json_carries_the_guides_numbers() -> None:
    data = json.loads(runner.invoke(app, ["size", "--params", "70e9", "--hosts", "32", "--output", "json"]).stdout)
    assert data["checkpoint_bytes"] == 840_000_000_000
    assert data["shard_bytes"] == 26_250_000_000
    assert data["total_bytes"] == 60_375_000_000 and data["in_memory_volume_size"] == "57Gi"
    assert data["buffer"] == 0.15


def test_size_text_names_the_derivation() -> None:
    result = runner.invoke(app, ["size", "--params", "8e9", "--tpu-type", "v5p", "--topology", "2x2x2"])
    assert result.stdout.splitlines()[0] == "v5p 2x2x2 on ct5p-hightpu-4t: 8 chips / 4 per host = 2 hosts per slice"


def test_size_refuses_a_derived_slice_whose_hosts_cannot_hold_the_ramdisk() -> None:
    result = runner.invoke(app, ["size", "--params", "70e9", "--tpu-type", "v5p", "--topology", "2x2x2"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "sizing.parameters" in result.stderr and "ct5p-hightpu-4t" in result.stderr


@pytest.mark.parametrize(
    "args, field",
    [
        (["--params", "70e9"], "--hosts"),
        (["--params", "70e9", "--hosts", "4", "--tpu-type", "v5p", "--topology", "2x2x2"], "--hosts"),
        (["--params", "70e9", "--tpu-type", "v5p"], "--topology"),
        (["--params", "70e9", "--tpu-type", "v9", "--topology", "2x2"], "slices.tpu_type"),
        (["--params", "70e9", "--hosts", "2", "-o", "xml"], "--output"),
    ],
)
def test_size_bad_options_exit_2(args, field) -> None:
    result = runner.invoke(app, ["size", *args])
    assert result.exit_code == 2 and result.stdout == ""
    assert field in result.stderr


def test_plan_reads_stdin_and_prints_yaml_and_json(tmp_path: Path) -> None:
    text = yaml.safe_dump(gke_config())
    as_yaml = yaml.safe_load(runner.invoke(app, ["plan", "-", "--output", "yaml"], input=text).stdout)
    as_json = json.loads(runner.invoke(app, ["plan", "-", "-o", "json"], input=text).stdout)
    assert as_yaml == as_json
    assert as_json["target"] == "gke"
    assert [m["kind"] for m in as_json["manifests"]] == ["CheckpointConfiguration", "JobSet"]
    # 70e9 x 12 bytes / 8 hosts (v6e 4x8) x 2 x 1.15 = 241.5 GB -> 225Gi
    assert as_json["ramdisk"]["in_memory_volume_size"] == "225Gi" and as_json["ramdisk"]["hosts_per_slice"] == 8
    assert {b["role"] for b in as_json["binds"]}
    # The same document from a file.
    path = tmp_path / "run.yaml"
    path.write_text(text)
    assert json.loads(runner.invoke(app, ["plan", str(path), "-o", "json"]).stdout) == as_json


def test_render_reads_stdin(tmp_path: Path) -> None:
    text = yaml.safe_dump(gke_config(customization={"queue_name": "q", "capacity": "spot"}))
    result = runner.invoke(app, ["render", "-"], input=text)
    assert result.exit_code == 0, result.output
    jobset = [d for d in yaml.safe_load_all(result.stdout) if d["kind"] == "JobSet"][0]
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"


def test_bad_stdin_names_stdin() -> None:
    result = runner.invoke(app, ["plan", "-"], input="slices: [unclosed")
    assert result.exit_code == 2 and "<stdin>" in result.stderr and "valid YAML" in result.stderr


def test_the_top_level_help_describes_every_command() -> None:
    """`mtc --help` names every command, not only some of them."""
    import re

    import typer.main

    commands = sorted(typer.main.get_command(app).commands)
    result = runner.invoke(app, ["--help"], terminal_width=200)
    assert result.exit_code == 0
    description = result.output.split("Options")[0]
    undescribed = [name for name in commands if not re.search(rf"^\s+{name}\s{{2,}}\w", description, re.M)]
    assert len(commands) >= 11 and undescribed == [], (undescribed, description)  # 11 and local up|down


@pytest.mark.parametrize("flag", ["-o", "--output"])
def test_advise_takes_the_output_option_of_every_command(flag: str) -> None:
    hand = ["--step-s", "1", "--save-local-s", "0.1", "--save-persistent-s", "1", "--restore-local-s", "2",
            "--restore-persistent-s", "10", "--restart-s", "30", "--host-mtbf-s", "3600"]
    as_json = runner.invoke(app, ["advise", *hand, flag, "json"])
    assert as_json.exit_code == 0, as_json.output
    as_yaml = runner.invoke(app, ["advise", *hand, flag, "yaml"])
    assert as_yaml.exit_code == 0, as_yaml.output
    assert yaml.safe_load(as_yaml.stdout)["advice"] == json.loads(as_json.stdout)["advice"]
    bad = runner.invoke(app, ["advise", *hand, flag, "xml"])
    assert bad.exit_code == 2 and "'xml' is not one of" in bad.output


def _commands(group=None, path=()):
    """Every command path of `mtc` (the `local` group's too)."""
    import typer.main

    group = group or typer.main.get_command(app)
    for name, command in group.commands.items():
        yield (*path, name)
        if hasattr(command, "commands"):
            yield from _commands(command, (*path, name))


@pytest.mark.parametrize("command", [(), *_commands()], ids=lambda c: " ".join(c) or "mtc")
def test_help_shows_no_type_for_a_flag(command) -> None:
    # A flag takes no value: `--wait <bool>` would read as `--wait true`.
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.stdout
    assert any(line.split()[1:3] == ["--help", "Show"] for line in result.stdout.splitlines())


def test_a_table_keeps_each_row_on_one_line_wider_than_80_columns() -> None:
    import io

    from rich.console import Console

    from mtc_provider.cli.console import print_table

    name = "llama-70b-v6e-256-multislice-production-7f3a9c2e-a12"
    reason = "the JobSet failed: a host of slice 3 was preempted and its pods were deleted by the node pool"
    buffer = io.StringIO()
    console = Console(file=buffer, soft_wrap=True, highlight=False)  # not a terminal: rich assumes 80 columns
    print_table(("attempt", "JobSet", "reason"), [("12", name, reason), ("13", "b[old]", "-")], console)
    console.print("a line after the table")
    lines = buffer.getvalue().splitlines()
    assert [line.split()[:2] for line in lines] == [["attempt", "JobSet"], ["12", name], ["13", "b[old]"],
                                                    ["a", "line"]]
    assert lines[1].rstrip().endswith(reason) and console.width == 80
