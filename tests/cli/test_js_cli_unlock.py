"""`mtc unlock RUN`: delete a run lock that outlived its run, over a kubeconfig to a real HTTP API server (the
fake one; a ConfigMap as the Kubernetes API serves it: https://kubernetes.io/docs/reference/kubernetes-api/
config-and-storage-resources/config-map-v1/), refused while a JobSet of the run is live."""

from __future__ import annotations

from typer.testing import CliRunner

from test_js_cli_status import attempt_body, kubeconfig
from tests.doubles.memory_jobset import status_failed, status_running
from mtc_provider.cli.app import app
from mtc_provider.core.basics import labels as L

runner = CliRunner()


def _api(config: str):
    from kubernetes import config as kconfig

    from mtc_provider.adapters.kubernetes import KubernetesJobSetApi

    return KubernetesJobSetApi(lambda: kconfig.new_client_from_config(config_file=config))


def _hold(api, run_id: str = "manual__1"):
    from mtc_provider.adapters.run_lock import RunLock

    owner = {"dag_id": "dag", "run_id": run_id, "task_id": "train", "map_index": -1, "try_number": 3}
    lock = RunLock(api, "default", "llama", L.run_labels("dag", run_id, "train", "llama"), owner)
    lock.acquire()
    return lock


def test_unlock_deletes_the_lock_and_says_who_held_it(tmp_path, apiserver, fast_retries) -> None:
    config = kubeconfig(tmp_path, apiserver)
    lock = _hold(_api(config))
    apiserver.put("default", attempt_body(tmp_path, "llama-x-a1", 1))
    apiserver.jobsets[("default", "llama-x-a1")]["status"] = status_failed()  # ended: no writer left
    result = runner.invoke(app, ["unlock", "llama", "--kubeconfig", config])
    assert result.exit_code == 0, result.output
    assert f"deleted run lock default/{lock.name}" in result.stdout
    assert "held by DAG dag, run manual__1, task train, try 3" in result.stdout
    assert apiserver.configmaps == {}
    again = runner.invoke(app, ["unlock", "llama", "--kubeconfig", config])
    assert again.exit_code == 1 and "has no lock" in again.stderr


def test_unlock_is_refused_while_a_jobset_of_the_run_is_live(tmp_path, apiserver, fast_retries) -> None:
    config = kubeconfig(tmp_path, apiserver)
    _hold(_api(config))
    apiserver.put("default", attempt_body(tmp_path, "llama-x-a2", 2))
    apiserver.jobsets[("default", "llama-x-a2")]["status"] = status_running()
    result = runner.invoke(app, ["unlock", "llama", "--kubeconfig", config])
    assert result.exit_code == 1 and "llama-x-a2" in result.stderr and "--force" in result.stderr
    assert len(apiserver.configmaps) == 1
    forced = runner.invoke(app, ["unlock", "llama", "--kubeconfig", config, "--force"])
    assert forced.exit_code == 0 and apiserver.configmaps == {}


def test_unlock_names_a_bad_option_before_any_request(tmp_path) -> None:
    result = runner.invoke(app, ["unlock", "llama", "--project", "p"])
    assert result.exit_code == 2 and "--project/--location/--cluster" in result.stderr


def test_unlock_checkpoint_dir_frees_a_directory_claimed_from_another_namespace(tmp_path, apiserver, fast_retries) -> None:
    """The user's explicit take-over of a checkpoint directory from its holder (here in namespace team-a, another
    Airflow deployment): said with the holder, and only on request."""
    from mtc_provider.adapters.run_lock import LockHeld, RunLock, claim_name

    config = kubeconfig(tmp_path, apiserver)
    api = _api(config)
    owner = {"dag_id": "dag", "run_id": "manual__1", "task_id": "train", "map_index": -1, "try_number": 1}
    directory = "gs://ckpt/out/llama/checkpoints"
    RunLock(api, "team-a", "llama", L.run_labels("dag", "manual__1", "train", "llama"), owner,
            deployment="airflow-a").acquire(checkpoint_dir=directory)
    theirs = RunLock(api, "team-b", "llama", L.run_labels("dag", "manual__1", "train", "llama"), owner,
                     deployment="airflow-b")
    try:
        theirs.acquire(owner_gone=lambda o: (True, "no such row"), checkpoint_dir=directory)
        raise AssertionError("another deployment's claim was taken over")
    except LockHeld as held:
        assert "another Airflow deployment" in str(held) and "namespace team-a" in str(held)
    result = runner.invoke(app, ["unlock", "--checkpoint-dir", directory, "--kubeconfig", config])
    assert result.exit_code == 0, result.output
    assert f"deleted checkpoint claim default/{claim_name(directory)}" in result.stdout
    assert "in namespace team-a, Airflow deployment airflow-a" in result.stdout
    theirs.acquire(owner_gone=lambda o: (True, "no such row"), checkpoint_dir=directory)  # now it may start
    neither = runner.invoke(app, ["unlock", "--kubeconfig", config])
    assert neither.exit_code == 2 and "--checkpoint-dir" in neither.stderr
