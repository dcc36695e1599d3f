"""Reads start nothing and take paths as a shell gives them (issue 35 items 11 and 12).

`mtc list`, `status` and `logs` on a local home whose cluster is not running answer from the runs' records and
checkpoint folders as files: no local API server or GCS is started (the home gains no file), and Airflow is not
imported (a subprocess, as a user runs it). Relative `--local-home` and `--base` are taken from the current
directory; a --base no reader takes is refused naming --base.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore
from mtc_provider.adapters.run_records import RunRecords
from mtc_provider.cli.app import app
from mtc_provider.core.attempt.run_summary import run_record
from tests.support.js_helpers import finalize

runner = CliRunner()


def make_home(home: Path, run_name: str = "r1") -> Path:
    where = home / "buckets" / "mtc-checkpoints" / run_name / "checkpoints"
    for step in (10, 20):
        finalize(str(where), step)
    RunRecords(str(where), store=LocalCheckpointStore()).write(str(where), run_record(
        run_name=run_name, namespace="default", checkpoint_dir=str(where), target_step=20, state="succeeded",
        attempts=[{"attempt": 1, "jobset": f"{run_name}-a1", "start": 1.0, "end": 61.0, "outcome": "finished",
                   "restarts": 0, "last_step": 20, "reason": "done"}], owner={"dag_id": "d"}, now=100.0))
    return home


def files(home: Path) -> set[str]:
    return {str(p.relative_to(home)) for p in home.rglob("*")}


def test_reads_of_a_stopped_local_home_start_nothing_and_import_no_airflow(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    before = files(home)
    script = (
        "import sys, json\n"
        "from mtc_provider.cli.app import app\n"
        "codes = []\n"
        "for args in sys.argv[1:]:\n"
        "    try:\n"
        "        codes.append(app(json.loads(args), standalone_mode=False) or 0)  # an Exit's code, returned\n"
        "    except SystemExit as exc:\n"
        "        codes.append(exc.code)\n"
        "    except Exception as exc:\n"
        "        codes.append(getattr(exc, 'exit_code', repr(exc)))\n"
        "print('CODES', json.dumps(codes))\n"
        "print('AIRFLOW', sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.'))[:5])\n"
        "print('KUBERNETES', 'kubernetes' in sys.modules)\n"
    )
    where = ["--local-home", str(home)]
    commands = [["list", *where, "-o", "json"], ["status", "r1", *where, "-o", "json"], ["logs", "r1", *where]]
    done = subprocess.run([sys.executable, "-c", script, *map(json.dumps, commands)], capture_output=True,
                          text=True, timeout=120)
    assert "CODES [0, 0, 1]" in done.stdout, done.stdout + done.stderr
    assert "AIRFLOW []" in done.stdout and "KUBERNETES False" in done.stdout, done.stdout
    assert '"state": "succeeded"' in done.stdout and '"newest_step": 20' in done.stdout
    assert "the local cluster of" in done.stderr and "is not running" in done.stderr  # logs says why
    assert files(home) == before  # no kubeconfig, no server state, no pid file: nothing was started


def test_relative_local_home_and_base_are_read_from_the_current_directory(tmp_path: Path, monkeypatch) -> None:
    make_home(tmp_path / "home")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    listed = runner.invoke(app, ["list", "--local-home", "home", "-o", "json"])
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.stdout)
    assert (row["run_name"], row["state"], row["step"]) == ("r1", "succeeded", 20)
    assert row["checkpoint_dir"] == str(tmp_path / "home/buckets/mtc-checkpoints/r1/checkpoints")
    status = runner.invoke(app, ["status", "r1", "--base", "home/buckets/mtc-checkpoints", "-o", "json"])
    assert status.exit_code == 0, status.output
    assert json.loads(status.stdout)["newest_step"] == 20


@pytest.mark.parametrize("base", ["s3://bucket/runs", "http://host/runs"])
def test_a_base_no_reader_takes_is_refused_naming_base(base: str, monkeypatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    result = runner.invoke(app, ["list", "--base", base])
    assert result.exit_code == 2, result.output
    assert f"--base: '{base}' is not allowed; allowed: gs://BUCKET/PATH, or a local path" in result.stderr


@pytest.mark.parametrize("example", sorted(p.name for p in (Path(__file__).resolve().parents[2] / "examples").glob(
    "*.yaml")))
def test_a_local_example_writes_where_mtc_list_reads(example: str, tmp_path: Path, monkeypatch) -> None:
    """A local run's checkpoints and record go under its home's bucket folders, the bases `mtc list --local-home`
    reads (examples/local.yaml wrote to /tmp/mtc-local, so its run dropped out of `mtc list` once it ended)."""
    from mtc_provider.cli.app import load_config
    from mtc_provider.cli.cluster_options import ClusterOptions

    home = tmp_path / "home"
    monkeypatch.setenv("MTC_LOCAL_HOME", str(home))
    config = load_config(Path(__file__).resolve().parents[2] / "examples" / example)
    if config.target != "local":
        pytest.skip(f"{example} is for target {config.target}")
    checkpoint_dir = config.checkpointing.checkpoint_directory
    (home / "buckets" / "mtc-checkpoints").mkdir(parents=True)
    bases = ClusterOptions(local_home=home).absolute().bases()
    assert any(checkpoint_dir.startswith(base + "/") for base in bases), (checkpoint_dir, bases)


def test_a_record_with_a_bad_attempt_is_refused_naming_its_field(tmp_path: Path) -> None:
    where = tmp_path / "out" / "r" / "checkpoints"
    RunRecords(str(where), store=LocalCheckpointStore()).write(str(where), run_record(
        run_name="r", namespace="default", checkpoint_dir=str(where), target_step=20, state="failed",
        attempts=[{"attempt": 1, "jobset": "r-a1", "start": 1.0, "end": 61.0, "outcome": "lost", "restarts": 0}],
        owner={"dag_id": "d"}, now=100.0))
    for command in (["status", "r"], ["list"]):
        result = runner.invoke(app, [*command, "--base", str(tmp_path / "out")])
        assert result.exit_code == 1, result.output
        assert "mtc-attempts.json of run r: attempts[0].outcome: 'lost' is not allowed; allowed: finished or " \
               "disrupted or failed" in " ".join(result.stderr.split())
