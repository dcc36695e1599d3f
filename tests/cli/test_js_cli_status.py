"""`mtc status RUN`: a run's attempts, their state and the newest finalized step, read through a kubeconfig from a
real HTTP API server (the fake one, driven by the kubernetes client) and from the local target's runner."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from tests.support.js_helpers import finalize
from tests.doubles.memory_jobset import status_failed, status_running
from mtc_provider.cli.app import app
from mtc_provider.core.basics import labels as L
from mtc_provider.core.definition.render.jobset_manifest import build_jobset
from mtc_provider.core.definition.description.spec import CheckpointingSpec, WorkloadSpec
from mtc_provider.core.definition.shape.tpu import SliceSpec
from mtc_provider.hooks import jobset as _hook  # noqa: F401  (Airflow logs its unit-test config once, on import)

runner = CliRunner()


def attempt_body(tmp_path, name: str, attempt: int, run_name: str = "llama") -> dict:
    labels = {**L.run_labels("dag", "manual__1", "train", run_name), L.TRY_NUMBER: str(attempt)}
    return build_jobset(SliceSpec("v6e", "2x2", 2), CheckpointingSpec(run_name, str(tmp_path / "out"), 100),
                        WorkloadSpec(name), labels)


def kubeconfig(tmp_path, server) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server.url}}],
        "users": [{"name": "u", "user": {"token": "t0k3n"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
    }))
    return str(path)


def seed(tmp_path, apiserver) -> None:
    apiserver.put("default", attempt_body(tmp_path, "llama-x-a1", 1))
    apiserver.put("default", attempt_body(tmp_path, "llama-x-a2", 2))
    apiserver.put("default", attempt_body(tmp_path, "other-a1", 1, run_name="other"))
    apiserver.jobsets[("default", "llama-x-a1")]["status"] = status_failed()
    apiserver.jobsets[("default", "llama-x-a2")]["status"] = status_running(restarts=1)
    finalize(str(tmp_path / "out" / "llama" / "checkpoints"), 60)


def test_status_json_over_a_kubeconfig(tmp_path, apiserver, fast_retries) -> None:
    seed(tmp_path, apiserver)
    result = runner.invoke(app, ["status", "llama", "--kubeconfig", kubeconfig(tmp_path, apiserver), "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [(a["attempt"], a["name"], a["phase"], a["restarts"]) for a in data["attempts"]] == [
        (1, "llama-x-a1", "failed", 0), (2, "llama-x-a2", "running", 1)]
    assert data["newest_step"] == 60
    assert data["checkpoint_dir"] == str(tmp_path / "out" / "llama" / "checkpoints")


def test_status_text_table(tmp_path, apiserver, fast_retries, monkeypatch) -> None:
    seed(tmp_path, apiserver)
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path, apiserver))  # the default, as kubectl reads it
    result = runner.invoke(app, ["status", "llama"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "Run llama in namespace default: running"  # no record: the state its JobSets show
    assert any(line.split()[:4] == ["2", "llama-x-a2", "running", "1"] for line in lines)
    assert lines[-1].startswith("newest finalized step: 60 (")


def test_status_of_an_unknown_run_exits_1(tmp_path, apiserver, fast_retries) -> None:
    result = runner.invoke(app, ["status", "nope", "--kubeconfig", kubeconfig(tmp_path, apiserver)])
    assert result.exit_code == 1 and "no JobSet of run 'nope'" in result.stderr


def test_status_bad_options_exit_2(tmp_path) -> None:
    result = runner.invoke(app, ["status", "llama", "--project", "p"])
    assert result.exit_code == 2 and "--project/--location/--cluster" in result.stderr
    result = runner.invoke(app, ["status", "llama", "--kubeconfig", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "an existing kubeconfig file" in result.stderr


def test_status_on_the_local_target(tmp_path, apiserver, fast_retries) -> None:
    """--local-home reads the home's running cluster through its kubeconfig (<home>/kubeconfig, as `mtc local up`
    writes it; here it names the fake API server), and starts none when it is not running (test_cli_reads.py)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "kubeconfig").write_text(open(kubeconfig(tmp_path, apiserver)).read())
    apiserver.put("default", attempt_body(tmp_path, "llama-x-a1", 1))
    apiserver.jobsets[("default", "llama-x-a1")]["status"] = status_running()
    result = runner.invoke(app, ["status", "llama", "--local-home", str(home), "-o", "yaml"])
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.stdout)
    assert data["attempts"][0]["phase"] == "running" and data["newest_step"] is None


def test_status_wait_shows_progress_and_times_out_with_the_shared_code(tmp_path, apiserver, fast_retries) -> None:
    """`--wait` on a run that goes on: its state on stderr while waiting, exit 3 at --timeout (as run and delete)."""
    from mtc_provider.cli.console import TIMED_OUT

    seed(tmp_path, apiserver)
    result = runner.invoke(app, ["status", "llama", "--kubeconfig", kubeconfig(tmp_path, apiserver), "--wait",
                                 "--timeout", "0.3", "--poll", "0.05", "-o", "json"])
    assert result.exit_code == TIMED_OUT == 3, result.output
    assert "waiting: run llama running, attempt 2, step 60" in result.stderr
    assert "timed out: run llama still running after 0.3 s" in result.stderr
    assert result.stdout == ""  # no half result on stdout for a script to parse


def test_status_text_keeps_a_long_jobset_name_whole(tmp_path, apiserver, fast_retries) -> None:
    # Piped output is 80 columns to rich: this row is wider, and its name must stay whole to be pasted to kubectl.
    name = "llama-70b-v6e256-multislice-7f3a9-a12"  # 37 of the 40 allowed
    apiserver.put("default", attempt_body(tmp_path, name, 1))
    apiserver.jobsets[("default", name)]["status"] = status_failed()
    result = runner.invoke(app, ["status", "llama", "--kubeconfig", kubeconfig(tmp_path, apiserver)])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith("1 "))
    assert row.split()[:3] == ["1", name, "failed"] and len(row.rstrip()) > 80
