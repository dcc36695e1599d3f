"""Two launches writing one checkpoint directory from two namespaces: the second is refused before it submits
anything, naming the holder and its namespace (adapters.run_lock's checkpoint claim); different directories in two
namespaces both run. The in-memory cluster keeps ConfigMaps per namespace, as the API server does."""

from __future__ import annotations

import pytest
from airflow.exceptions import AirflowFailException, TaskDeferred

from tests.support.js_helpers import FakeTI, launch, run_try


def _launch(tmp_path, namespace: str, out: str):
    return launch(str(tmp_path), deferrable=True,
                  workload={"jobset_name": "train", "max_restarts": 2, "namespace": namespace},
                  checkpointing={"run_name": "llama", "base_output_directory": out, "steps": 100,
                                 "checkpoint_period": 20})


def test_the_second_namespace_writing_the_same_directory_is_refused_naming_the_holder(cluster, tmp_path):
    with pytest.raises(TaskDeferred):  # submitted, watching: it holds its run lock and its claim
        run_try(_launch(tmp_path, "team-a", f"{tmp_path}/out"), FakeTI(dag_id="dag_a"))
    with pytest.raises(AirflowFailException) as refused:
        run_try(_launch(tmp_path, "team-b", f"{tmp_path}/out"), FakeTI(dag_id="dag_b"))
    text = str(refused.value)
    assert f"checkpoint directory {tmp_path}/out/llama/checkpoints" in text, text
    assert "held by DAG dag_a, run run-1, task train in namespace team-a" in text
    assert "mtc unlock --checkpoint-dir" in text
    assert [name for name in cluster.created] == [cluster.created[0]]  # the second submitted nothing


def test_two_namespaces_two_directories_both_run(cluster, tmp_path):
    for namespace, dag in (("team-a", "dag_a"), ("team-b", "dag_b")):
        with pytest.raises(TaskDeferred):
            run_try(_launch(tmp_path, namespace, f"{tmp_path}/{namespace}"), FakeTI(dag_id=dag))
    assert len(cluster.created) == 2
