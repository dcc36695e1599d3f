"""The sample DAGs load with no import errors, have the expected graphs, and import nothing heavy at parse time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("jax", "orbax", "kubernetes", "kubernetes_asyncio", "google.cloud.storage", "google.cloud.container_v1",
         "matplotlib", "tensorstore", "numpy")


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


def test_dags_load_without_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert {"mtc_resilient_training", "mtc_cluster_setup", "mtc_checkpoint_evaluation"} <= set(dagbag.dag_ids)


def _edges(dag) -> set[tuple[str, str]]:
    return {(up, task.task_id) for task in dag.tasks for up in task.upstream_task_ids}


def test_training_graph(dagbag):
    dag = dagbag.dags.get("mtc_resilient_training")
    assert {("plan", "readiness"), ("readiness", "train"), ("train", "checkpoint_progress"),
            ("checkpoint_progress", "goodput"), ("goodput", "teardown"), ("train", "teardown")} <= _edges(dag)
    train = dag.get_task("train")
    assert train.retries >= 3
    assert dag.get_task("teardown").is_teardown
    assert "startup_timeout" in str(train.startup_timeout)  # the plan's derived bound (core.definition.cluster.startup), never None
    readiness = dag.get_task("readiness")  # checks the run's CheckpointConfiguration against the run
    assert "checkpoint_configuration_name" in str(readiness.checkpoint_configuration_name)
    assert "bucket" in str(readiness.bucket_name)
    # The run description's sections, one to one with the `mtc` YAML (core.definition.description.run; examples/*.yaml).
    assert set(dag.params.keys()) == {"target", "kubernetes_conn_id", "bucket", "cluster", "customization", "slices",
                                      "checkpoint_configuration_name",
                                      "sizing", "checkpointing", "workload", "poll_interval", "stall_timeout",
                                      "startup_timeout", "step_seconds",
                                      "fault_plan", "apply_advice", "keep_failed_attempts", "pod_logs",
                                      "pod_logs_interval"}
    import dataclasses

    from mtc_provider.core.definition.description.spec import RunConfig

    # ... and every one of them a field of the run description, each field a param.
    assert set(dag.params.keys()) == {f.name for f in dataclasses.fields(RunConfig)}
    assert set(dag.params["checkpointing"]) >= {
        "enable_checkpointing", "enable_emergency_checkpoint", "async_checkpointing", "local_checkpoint_directory",
        "local_checkpoint_period", "checkpoint_period", "enable_single_replica_ckpt_restoring",
        "enable_autocheckpoint", "steps", "run_name"}


def test_setup_graph_is_the_guides_order(dagbag):
    dag = dagbag.dags.get("mtc_cluster_setup")
    assert {("plan", "readiness"), ("enable_mtc", "bucket"), ("bucket", "grant_bucket_access"),
            ("grant_bucket_access", "checkpoint_configuration"), ("node_pools", "ready"),
            ("checkpoint_configuration", "ready")} <= _edges(dag)


def _ancestors(dag, task_id: str) -> set[str]:
    seen, todo = set(), [task_id]
    while todo:
        for up in dag.get_task(todo.pop()).upstream_task_ids:
            if up not in seen:
                seen.add(up)
                todo.append(up)
    return seen


def test_setup_checks_readiness_before_every_change(dagbag):
    """The version, Autopilot and Workload Identity on the pools are read before the two cluster updates, the
    bucket, the IAM change and the node pools (a cluster at exactly 1.32.3-gke.1170000 changes nothing)."""
    dag = dagbag.dags.get("mtc_cluster_setup")
    for task_id in ("enable_mtc", "bucket", "grant_bucket_access", "checkpoint_configuration", "node_pools"):
        assert "readiness" in _ancestors(dag, task_id), task_id
    first = dag.get_task("readiness")
    assert first.retries == 0 and "fixed_by_later_tasks" in first.template_fields


def _plan(dag, change: dict, monkeypatch, tmp_path) -> dict:
    from types import SimpleNamespace

    monkeypatch.setenv("MTC_LOCAL_HOME", str(tmp_path / "home"))
    params = {key: dag.params[key] for key in dag.params} | change
    return dag.get_task("plan").python_callable(params=params, dag_run=SimpleNamespace(conf=change))


SETUP_CLUSTER = {"project_id": "my-project", "location": "us-central1", "name": "c"}
SETUP_GKE = {"target": "gke", "cluster": SETUP_CLUSTER}


def _zones(*zones: str, location: str = "us-central1") -> dict:
    return {"cluster": {**SETUP_CLUSTER, "location": location, "node_locations": list(zones)}}


def test_setup_and_training_agree_on_the_workload_ksa_and_machine_type(dagbag, monkeypatch, tmp_path):
    """The KSA the setup binds to the bucket is the one the training pods run as; both forms take machine_type."""
    setup, training = dagbag.dags["mtc_cluster_setup"], dagbag.dags["mtc_resilient_training"]
    assert "service_account" not in setup.params and "service_account" not in training.params
    # The same sections in both forms (the run description's, core.definition.description.run): one description serves both DAGs.
    assert {"target", "bucket", "cluster", "slices", "sizing", "checkpointing", "workload"} <= set(setup.params)
    assert "machine_type" in setup.params["slices"] and "machine_type" in training.params["slices"]
    described = {"target": "gke", "cluster": {"project_id": "my-project", "location": "us-central1", "name": "c"},
                 "slices": {"tpu_type": "v6e", "topology": "4x4", "machine_type": "ct6e-standard-4t"},
                 "workload": {"namespace": "ml", "image": "us-docker.pkg.dev/p/r/maxtext:1"}}
    planned_setup = _plan(setup, {**described, "workload": {"namespace": "ml"}}, monkeypatch, tmp_path)
    planned_training = _plan(training, described, monkeypatch, tmp_path)
    assert planned_setup["service_account"] == planned_training["workload"]["service_account"]
    assert planned_setup["namespace"] == planned_training["workload"]["namespace"] == "ml"
    assert planned_setup["slices"] == planned_training["slices"]
    grant = setup.get_task("grant_bucket_access")
    assert grant.workload_service_account.endswith("['service_account'] }}")  # from the plan, not the form


def test_setup_node_locations_default_from_the_tpu_zone(dagbag, monkeypatch, tmp_path):
    setup = dagbag.dags["mtc_cluster_setup"]
    assert _plan(setup, {**SETUP_GKE, "create_node_pools": True, **_zones("us-central1-b")}, monkeypatch,
                 tmp_path)["node_locations"] == ["us-central1-b"]
    zonal = {**SETUP_GKE, **_zones(location="us-central1-a"), "create_node_pools": True}
    assert _plan(setup, zonal, monkeypatch, tmp_path)["node_locations"] == ["us-central1-a"]
    assert setup.get_task("node_pools").node_locations.endswith("['node_locations'] }}")
    planned = _plan(setup, {**SETUP_GKE, "enable_mtc": True, "create_node_pools": True, **_zones("us-central1-b")},
                    monkeypatch, tmp_path)
    assert planned["fixed_by_later_tasks"] == ["workload_identity_pool", "high_scale_checkpointing_addon",
                                               "gcs_fuse_csi_driver_addon", "tpu_node_pools"]


@pytest.mark.parametrize("change, allowed", [
    ({"create_node_pools": True}, "us-central1-a: cluster location us-central1 is a region"),
    (_zones("europe-west4-a"), "a zone of the cluster's region us-central1"),
    (_zones("us-central1"), "a zone such as us-central1-a"),
])
def test_setup_regional_cluster_without_a_tpu_zone_is_refused_in_plan(dagbag, monkeypatch, tmp_path, change,
                                                                       allowed):
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match=r"cluster\.node_locations") as caught:
        _plan(dagbag.dags["mtc_cluster_setup"], {**SETUP_GKE, **change}, monkeypatch, tmp_path)
    assert allowed in str(caught.value) and " is not allowed; allowed: " in str(caught.value)


def test_evaluation_is_scheduled_on_the_checkpoint_asset_with_a_watcher(dagbag):
    dag = dagbag.dags.get("mtc_checkpoint_evaluation")
    [asset] = dag.timetable.asset_condition.objects
    assert asset.uri.startswith("file:///") and asset.uri.endswith("/mtc-demo/checkpoints")
    assert asset.watchers and asset.watchers[0].trigger.__class__.__name__ == "CheckpointAssetTrigger"


@pytest.mark.parametrize("name", ["mtc_resilient_training.py", "mtc_cluster_setup.py", "mtc_checkpoint_evaluation.py"])
def test_dag_files_import_nothing_heavy(name):
    """Parse time stays close to an empty DAG's: no JAX, Orbax, Kubernetes or Google client at import."""
    code = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('dagfile', {str(REPO / 'dags' / name)!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def _load_evaluation_dag(env: dict[str, str]) -> dict:
    """Parse the evaluation DAG file in a fresh interpreter with `env`; report its tasks and heavy imports."""
    import os

    code = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('dagfile', {str(REPO / 'dags' / 'mtc_checkpoint_evaluation.py')!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "dag = module.dag\n"
        "tasks = {t.task_id: {'wait_for': getattr(t, 'wait_for', None) if t.task_id != 'readiness' else None, 'upstream': sorted(t.upstream_task_ids),"
        " 'workload': getattr(t, 'workload', None), 'checkpointing': getattr(t, 'checkpointing', None),"
        " 'slices': getattr(t, 'slices', None), 'target': getattr(t, 'target', None),"
        " **({'checkpoint_configuration_name': t.checkpoint_configuration_name, 'bucket_name': t.bucket_name}"
        " if t.task_id == 'readiness' else {})} for t in dag.tasks}\n"
        f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "print(json.dumps({'tasks': tasks, 'heavy': heavy, 'uri': module.checkpoints.uri,"
        " 'max_active_runs': dag.max_active_runs}))\n"
    )
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MTC_EVAL_")} | env
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=full_env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_evaluation_on_a_gs_checkpoint_dir_launches_a_one_shot_jobset_on_gke():
    loaded = _load_evaluation_dag({
        "MTC_EVAL_CHECKPOINT_DIR": "gs://bucket/run/checkpoints", "MTC_EVAL_RUN_NAME": "run",
        "MTC_EVAL_PROJECT_ID": "proj", "MTC_EVAL_LOCATION": "us-east5", "MTC_EVAL_CLUSTER": "tpu",
        "MTC_EVAL_IMAGE": "us-docker.pkg.dev/p/maxtext:1", "MTC_EVAL_SLICES": '{"tpu_type": "v5e", "topology": "4x4", "num_slices": 2}',
    })
    tasks = loaded["tasks"]
    assert set(tasks) == {"plan_eval", "readiness", "evaluate_on_gke"}
    gke = tasks["evaluate_on_gke"]
    assert gke["wait_for"] == "completion" and gke["upstream"] == ["readiness"]
    # Readiness is given the CheckpointConfiguration's name and the bucket it must name.
    readiness = tasks["readiness"]
    assert readiness["upstream"] == ["plan_eval"] and readiness["bucket_name"] == "bucket"
    assert readiness["checkpoint_configuration_name"] == "mtc-checkpoint-config"
    assert readiness["slices"] == gke["slices"] and readiness["target"] == gke["target"]
    assert gke["target"] == {"kind": "gke", "project_id": "proj", "location": "us-east5", "cluster_name": "tpu"}
    assert gke["slices"] == {"tpu_type": "v5e", "topology": "4x4", "num_slices": 2}
    assert gke["checkpointing"] == {"run_name": "run-eval", "base_output_directory": "gs://bucket", "steps": 1,
                                    "enable_checkpointing": False}
    workload = gke["workload"]
    assert workload["image"] == "us-docker.pkg.dev/p/maxtext:1" and "maxtext.inference.decode" in workload["command"]
    assert "plan_eval" in workload["extra_flags"]["load_parameters_path"]  # templated from plan_eval's XCom
    assert loaded["uri"] == "gs://bucket/run/checkpoints" and loaded["max_active_runs"] == 1
    # Airflow normalizes any gs:// asset URI with the google provider's handler, which imports the GCS hook
    # (and google.cloud.storage): a cost of the gs:// asset itself. Nothing else heavy is imported.
    assert set(loaded["heavy"]) <= {"google.cloud.storage"}


def test_evaluation_on_a_local_checkpoint_dir_restores_locally():
    loaded = _load_evaluation_dag({})
    assert set(loaded["tasks"]) == {"evaluate"} and loaded["uri"].startswith("file:///")
    assert loaded["heavy"] == []


def test_plan_eval_picks_the_newest_announced_checkpoint(monkeypatch):
    import importlib.util

    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv("MTC_EVAL_CHECKPOINT_DIR", "gs://bucket/run/checkpoints")
    monkeypatch.setenv("MTC_EVAL_RUN_NAME", "run")
    spec = importlib.util.spec_from_file_location("eval_gke", REPO / "dags" / "mtc_checkpoint_evaluation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    plan_eval = module.dag.get_task("plan_eval").python_callable

    def event(step: int) -> dict:
        return {"from_trigger": True, "payload": {"step": step, "commit_time": 1.0, "run_name": "run",
                                                  "checkpoint_dir": "gs://bucket/run/checkpoints",
                                                  "path": f"gs://bucket/run/checkpoints/{step}"}}

    planned = plan_eval(triggering_asset_events={"asset": [event(20), event(40), event(30)]})
    assert planned == {"step": 40, "path": "gs://bucket/run/checkpoints/40", "jobset_name": "eval-s40",
                       "load_parameters_path": "gs://bucket/run/checkpoints/40/items"}
    with pytest.raises(AirflowFailException, match="nothing to evaluate"):
        plan_eval(triggering_asset_events={})


# The fields only one target reads (core.definition.description.params.training_run / cluster_setup_run read them only for that target,
# or refuse them elsewhere, as core.definition.render.maxtext.check_target_mode does the multi-tier mode on the local target).
GKE_ONLY_FIELDS = {"cluster", "location", "cluster_name", "enable_multi_tier_checkpointing",
                   "multi_tier_checkpointing_backup_interval_minutes", "multi_tier_checkpointing_backup_interval_steps",
                   "use_replicator_service", "tpu_zone", "enable_mtc", "create_node_pools", "node_pool_prefix"}
LOCAL_ONLY_FIELDS = {"step_time_ms", "local_workload", "distributed_timeout_s", "fault_plan"}


@pytest.mark.parametrize("dag_id", ["mtc_resilient_training", "mtc_cluster_setup"])
def test_trigger_form_is_in_sections_with_titles(dagbag, dag_id):
    """Every field has a section and a title (Airflow's trigger form reads both from the Param's schema:
    airflow/example_dags/example_params_ui_tutorial.py@3.3.2), and a field only one target reads says so."""
    from mtc_provider.dag_support import FORM_SECTIONS, GKE_ONLY, LOCAL_ONLY, REHEARSAL

    dag = dagbag.dags[dag_id]
    problems = []
    for key in dag.params:
        param = dag.params.get_param(key)
        schema, description = param.schema, param.description or ""
        if schema.get("section") not in FORM_SECTIONS:
            problems.append(f"{key}: section {schema.get('section')!r} is not one of {FORM_SECTIONS}")
        if not str(schema.get("title") or "").strip():
            problems.append(f"{key}: no title")
        if not description.strip():
            problems.append(f"{key}: no description")
        if key in GKE_ONLY_FIELDS and not description.startswith(GKE_ONLY):
            problems.append(f"{key}: a GKE-only field whose description does not start with {GKE_ONLY!r}")
        if (key in LOCAL_ONLY_FIELDS or schema.get("section") == REHEARSAL) and not description.startswith(LOCAL_ONLY):
            problems.append(f"{key}: a local-only field whose description does not start with {LOCAL_ONLY!r}")
        if key in LOCAL_ONLY_FIELDS and schema.get("section") != REHEARSAL:
            problems.append(f"{key}: a local-only field outside the section {REHEARSAL!r}")
        if key not in GKE_ONLY_FIELDS and description.startswith(GKE_ONLY):
            problems.append(f"{key}: says {GKE_ONLY!r} but is not listed as GKE-only here")
    assert not problems, "\n".join(problems)
    sections = [dag.params.get_param(key).schema["section"] for key in dag.params]
    # One block per section, in the form's order (the form shows sections in the order their first field comes).
    firsts = list(dict.fromkeys(sections))
    assert sections == [s for s in firsts for _ in range(sections.count(s))], sections
    assert firsts == [s for s in FORM_SECTIONS if s in firsts], firsts


def test_trigger_form_sections_survive_serialization(dagbag):
    """The UI reads the serialized DAG: section and title must come back from it for every field."""
    from airflow.serialization.serialized_objects import DagSerialization

    dag = dagbag.dags["mtc_resilient_training"]
    loaded = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    for key in dag.params:
        schema = loaded.params.get_param(key).schema
        assert (schema["section"], schema["title"]) == (dag.params.get_param(key).schema["section"],
                                                        dag.params.get_param(key).schema["title"]), key
    assert loaded.params.get_param("fault_plan").schema["section"] == "Rehearsal (local target only)"


WITHOUT_LOCAL_FORMS = """
import importlib.metadata, json, sys

class Block:  # as if mtc-local were not installed (tests/core/test_purity.py does the same)
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "mtc_local":
            raise ImportError(f"blocked: mtc-local is not installed: {name}")

sys.meta_path.insert(0, Block())
listed = importlib.metadata.entry_points

def entry_points(**selection):
    found = listed(**selection)
    if selection.get("group") != "mtc_provider.targets":
        return found
    return type(found)(p for p in found if p.dist is None or p.dist.name != "mtc-local")

importlib.metadata.entry_points = entry_points
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1])
forms = {d: (bag.dags[d].params.get_param("target").value, bag.dags[d].params.get_param("target").schema["enum"])
         for d in ("mtc_resilient_training", "mtc_cluster_setup")}
print(json.dumps({"errors": sorted(bag.import_errors), "forms": forms}))
"""


@pytest.mark.parametrize("dag_id", ["mtc_resilient_training", "mtc_cluster_setup"])
def test_the_forms_target_offers_the_installed_kinds_local_first(dagbag, dag_id):
    from mtc_provider.targets import kinds

    target = dagbag.dags[dag_id].params.get_param("target")
    assert target.value == "local" and target.schema["enum"] == ["local", *sorted(set(kinds()) - {"local"})]


def test_without_mtc_local_the_forms_offer_the_installed_kinds_and_the_dags_load():
    out = subprocess.run([sys.executable, "-c", WITHOUT_LOCAL_FORMS, str(REPO / "dags")], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["errors"] == []
    assert report["forms"] == {dag_id: ["gke", ["gke", "kubernetes"]]
                               for dag_id in ("mtc_resilient_training", "mtc_cluster_setup")}
