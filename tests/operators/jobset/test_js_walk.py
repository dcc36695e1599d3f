"""The walk of `checkpoint_period` from the training DAG's form to the JobSet it submits, counted on real objects:
the DAG's own plan task, its own `train` task with its templates rendered from the plan's XCom (as Airflow renders
them, through the DAG's native Jinja environment), one try on the in-memory cluster. The spec's one check of the
periods (`CheckpointingSpec._check_periods`) runs in the plan and once more in each try (one path for the plan's
sections and a DAG author's alike: re-validating costs well under a millisecond); the try renders its JobSet once
(docs/architecture.md, "The walk of checkpoint_period, counted")."""

from __future__ import annotations

import collections
import copy
import json
from types import SimpleNamespace

import pytest
from airflow.sdk.bases.xcom import BaseXCom
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore
from mtc_provider.core.definition.render import jobset_manifest as core_jobset
from mtc_provider.core.definition.description.spec import CheckpointingSpec
from tests.conftest import sample_dag


@pytest.fixture(scope="module")
def training_dag():
    return sample_dag("mtc_resilient_training.py", "walk_training").dag


@pytest.fixture
def counted(monkeypatch):
    """Calls of the periods' check, the flags' rendering and the JobSet builder; each still does its real work."""
    calls: collections.Counter = collections.Counter()

    def count(owner, name: str) -> None:
        real = getattr(owner, name)

        def through(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, through)

    count(CheckpointingSpec, "_check_periods")
    count(CheckpointingSpec, "maxtext_flags")
    count(core_jobset, "build_jobset")
    return calls


class TI:
    """The task instance fields the launch reads; xcom_pull answers with the plan task's XCom."""

    dag_id, run_id, task_id, map_index, max_tries = "mtc_resilient_training", "manual__1", "train", -1, 6

    def __init__(self, plan: dict, try_number: int = 1) -> None:
        self.plan, self.try_number, self.xcoms = plan, try_number, {}

    def xcom_push(self, key, value) -> None:
        self.xcoms[key] = value

    def xcom_pull(self, task_ids=None, key="return_value"):
        return self.plan if task_ids == "plan" else self.xcoms.get(key)


def plan_and_train(dag, tmp_path, monkeypatch, conf: dict | None = None):
    """The plan task's result as XCom keeps it (JSON), and the train task rendered from it for try 1."""
    monkeypatch.setenv("MTC_LOCAL_HOME", str(tmp_path / "home"))
    params = {key: dag.params[key] for key in dag.params} | (conf or {})
    returned = dag.get_task("plan").python_callable(params=params, dag_run=SimpleNamespace(conf=conf or {}))
    # What the launch reads back: Airflow's own XCom serialization, stored as JSON by the API server.
    stored = json.loads(json.dumps(BaseXCom.serialize_value(returned)))
    plan = BaseXCom.deserialize_value(SimpleNamespace(value=stored))
    train = copy.deepcopy(dag.get_task("train"))
    ti = TI(plan)
    context = {"ti": ti, "params": params, "run_id": ti.run_id}
    train.render_template_fields(context)
    train.checkpoint_store_factory = lambda directory, conn_id: LocalCheckpointStore()
    return plan, train, context


def args_of(body: dict) -> list[str]:
    return body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["args"]


def test_plan_and_one_try_check_the_periods_once_each_and_render_the_jobset_once(training_dag, tmp_path,
                                                                                 monkeypatch, cluster, counted):
    plan, train, context = plan_and_train(training_dag, tmp_path, monkeypatch)
    assert counted == {"_check_periods": 1}  # the plan: the one check; it renders no flags
    assert train.checkpointing == plan["checkpointing"] and "digest" not in plan

    with pytest.raises(TaskDeferred):
        train.execute(context)

    assert counted == {"_check_periods": 2, "build_jobset": 1, "maxtext_flags": 1}  # the try: one check, one render
    (submitted,) = cluster.objects.values()
    assert {"checkpoint_period=20", "local_checkpoint_period=4"} <= set(args_of(submitted))


def test_each_try_checks_and_renders_its_own_jobset_once(training_dag, tmp_path, monkeypatch, cluster, counted):
    plan, train, context = plan_and_train(training_dag, tmp_path, monkeypatch)
    for try_number in (1, 2):
        context["ti"].try_number = try_number
        train._specs(context["ti"])
        assert train._rendered[0].endswith(f"-a{try_number}")
    assert counted == {"_check_periods": 3, "build_jobset": 2, "maxtext_flags": 2}


def test_a_dag_authors_arguments_are_checked_once_at_the_operator(training_dag, tmp_path, monkeypatch, cluster,
                                                                 counted):
    plan, train, context = plan_and_train(training_dag, tmp_path, monkeypatch)
    counted.clear()
    with pytest.raises(TaskDeferred):
        train.execute(context)
    assert counted == {"_check_periods": 1, "build_jobset": 1, "maxtext_flags": 1}
    # The lineage facets at the end of the try read the same specs: nothing is checked again.
    train.get_openlineage_facets_on_complete(context["ti"])
    assert counted["_check_periods"] == 1


@pytest.mark.parametrize("section, key, value, error", [
    ("checkpointing", "checkpoint_period", 0, "checkpointing.checkpoint_period: 0 is not allowed; allowed: a positive "
                                              "integer"),
    ("checkpointing", "local_checkpoint_period", 30, "checkpointing.local_checkpoint_period: 30 is not allowed; "
                                                     "allowed: an integer > 0 and smaller than checkpoint_period (20)"),
    ("workload", "max_restarts", -1, "workload.max_restarts: -1 is not allowed; allowed: an integer >= 0"),
])
def test_a_section_changed_after_the_plan_is_checked_before_any_call(training_dag, tmp_path, monkeypatch, cluster,
                                                                     section, key, value, error):
    """A section edited after the plan is validated at the operator and refused before any call (no lock, no
    JobSet)."""
    plan, train, context = plan_and_train(training_dag, tmp_path, monkeypatch)
    getattr(train, section)[key] = value
    with pytest.raises(AirflowFailException, match="invalid spec: " + error.replace("(", r"\(").replace(")", r"\)")):
        train.execute(context)
    assert cluster.created == [] and cluster.locks == {}
