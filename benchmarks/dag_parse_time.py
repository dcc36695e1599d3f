"""Benchmark 5: DAG parse time of each sample DAG as Airflow's DAG processor times it, against two references:
plain Airflow with one TaskFlow `@task`, and the same training pipeline written with the google and
cncf.kubernetes providers' own operators (the peer DAG).

Each measurement is a fresh Python process (no module cached from an earlier parse) that does what Airflow
3.3's DAG processor does for one file: the manager calls `gc.freeze()` once before it starts parsing
(`DagFileProcessorManager.before_run`); `DagFileProcessorProcess.start(...)` pre-imports the `airflow.*` modules
the file names (`parsing_pre_import_modules`), forks a parser that imports the file with `BundleDagBag`,
serializes its DAGs and sends them back; the manager records `time.monotonic() - proc.start_time` as the
file's `DagFileStat.last_duration` (the `dag_processing.last_duration` metric); here the result is collected
every 10 ms instead of on the manager's ~1 s loop. Bytecode is cached as in a deployment: every file is parsed
once (discarded) before the measured rounds, so `.pyc` files exist. The same process then loads the file with
`DagBag` and records its `dagbag_stats` duration (what `airflow dags report` prints). Files are measured
round-robin, the order reversed every round; the result is the median per file.

Goals: each sample DAG parses no slower than the peer DAG and in <= 1.2x the one-`@task` DAG's time.

    python -m benchmarks.dag_parse_time [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, argument_parser, interleaved, median, print_table, ratio, result_path, write_result

DAGS = ("mtc_resilient_training.py", "mtc_cluster_setup.py", "mtc_checkpoint_evaluation.py")
QUICK_DAGS = ("mtc_checkpoint_evaluation.py",)  # --quick: one DAG and the one-@task one, one round each
GOAL_ONE_TASK = 1.2  # <= 1.2x the one-@task DAG
GOAL_PEER = 1.0  # no slower than the peer DAG
POLL_S = 0.01
EMPTY_DAG = '''"""An empty DAG: the baseline."""
import datetime

from airflow.sdk import DAG

with DAG(dag_id="empty", schedule=None, start_date=datetime.datetime(2026, 1, 1), catchup=False):
    pass
'''
# A second baseline: plain Airflow with one TaskFlow task (the sample DAGs use @task, which imports the standard
# provider's Python operator), to tell Airflow's own share from ours.
ONE_TASK_DAG = '''"""One TaskFlow task, nothing else: plain Airflow."""
import datetime

from airflow.sdk import DAG, task

with DAG(dag_id="one_task", schedule=None, start_date=datetime.datetime(2026, 1, 1), catchup=False):

    @task
    def hello():
        return "hello"

    hello()
'''
# The peer: the training pipeline (plan, bucket, JobSet launch with retries, checkpoint sensor, evaluation job,
# teardown) with the google and cncf.kubernetes providers' operators, as a user without this provider writes it.
PEER_DAG_TEMPLATE = '''\"\"\"The training pipeline written with the google and cncf.kubernetes providers' own operators (the peer).\"\"\"
import datetime

from airflow.providers.google.cloud.operators.gcs import GCSCreateBucketOperator
from airflow.providers.google.cloud.operators.kubernetes_engine import (
    GKECreateCustomResourceOperator,
    GKEDeleteCustomResourceOperator,
    GKEStartJobOperator,
)
from airflow.providers.google.cloud.sensors.gcs import GCSObjectsWithPrefixExistenceSensor
from airflow.sdk import DAG, Param, task

{form_prelude}

CLUSTER = {{"project_id": "my-project", "location": "us-east5", "cluster_name": "tpu-cluster"}}
JOBSET = \"\"\"
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {{name: "{{{{ ti.xcom_pull(task_ids='plan')['jobset_name'] }}}}", namespace: default}}
spec:
  failurePolicy: {{maxRestarts: 2}}
  replicatedJobs:
  - name: slice
    replicas: 2
    template:
      spec:
        parallelism: 1
        completions: 1
        backoffLimit: 0
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: maxtext
              image: "{{{{ params.image }}}}"
              command: ["python3", "-m", "MaxText.train", "MaxText/configs/base.yml"]
\"\"\"

with DAG(dag_id="peer_training", schedule=None, start_date=datetime.datetime(2026, 1, 1), catchup=False,
{form}):

    @task
    def plan(params=None) -> dict:
        return {{"jobset_name": f"{{params['run_name']}}-a1"}}

    bucket = GCSCreateBucketOperator(task_id="bucket", bucket_name="{{{{ params.bucket }}}}",
                                     project_id=CLUSTER["project_id"], location="US-EAST5")
    train = GKECreateCustomResourceOperator(task_id="train", yaml_conf=JOBSET, **CLUSTER, retries=6,
                                            retry_delay=datetime.timedelta(seconds=3))
    progress = GCSObjectsWithPrefixExistenceSensor(
        task_id="checkpoint_progress", bucket="{{{{ params.bucket }}}}",
        prefix="{{{{ params.run_name }}}}/checkpoints/{{{{ params.steps }}}}/commit_success.txt", deferrable=True)
    evaluate = GKEStartJobOperator(task_id="evaluate", name="eval", namespace="default", image="{{{{ params.image }}}}",
                                   cmds=["python3", "-m", "MaxText.decode"], wait_until_job_complete=True,
                                   deferrable=True, **CLUSTER)
    teardown = GKEDeleteCustomResourceOperator(task_id="teardown", yaml_conf=JOBSET, **CLUSTER).as_teardown(
        setups=train)

    plan() >> bucket >> train >> progress >> evaluate >> teardown
'''


def without_form(training_dag: Path) -> str:
    """The training DAG without its trigger form (`params=`): what the 26 Params cost in a parse (Airflow
    validates each Param's JSON schema twice per task when it serializes the DAG)."""
    source = training_dag.read_text()
    return source.replace("    params=PARAMS,\n", "", 1)


def peer_dag(training_dag: Path) -> str:
    """The peer DAG with the training DAG's trigger form copied from its source: the same pipeline and the same
    form, so the comparison isolates the operators and their imports (Airflow validates every Param's JSON schema
    once per task when it serializes a DAG, a cost both pay alike)."""
    source = training_dag.read_text()
    prelude_start = source.index("DEFAULT_FAULT_PLAN = [")
    prelude = source[prelude_start:source.index("]\n", prelude_start) + 1]
    form_start = source.index("PARAMS = {\n")
    form = source[form_start:source.index("\n}\n", form_start) + 2]  # the module-level trigger form
    return PEER_DAG_TEMPLATE.format(form_prelude=prelude + "\n\n" + form, form="    params=PARAMS,")


def measure_in_this_process(path: str, parses: int = 1) -> dict[str, Any]:
    """Parse `path` `parses` times the way the DAG processor does (each parse a fork of this same process, as the
    manager forks one parser per parse), then once with DagBag; both timed by Airflow's own code paths."""
    import selectors

    import httpx
    import structlog
    from uuid6 import uuid7

    from airflow.dag_processing.processor import DagFileProcessorProcess
    from airflow.sdk.api.client import Client
    from airflow.sdk.log import logging_processors

    selector = selectors.DefaultSelector()
    # Parsing these files makes no API call; a request would fail loudly rather than pass silently.
    client = Client(base_url=None, token="", dry_run=True,
                    transport=httpx.MockTransport(lambda request: httpx.Response(500)))
    client.base_url = "http://in-process.invalid./"
    log_file = open(os.devnull, "ab")
    logger = structlog.wrap_logger(structlog.BytesLogger(log_file), processors=logging_processors(json_output=True),
                                   logger_name="processor").bind()
    file = Path(path)
    gc.freeze()  # DagFileProcessorManager.before_run: "To prevent COW in forked process parsing dag file"
    samples = [_parse_once(DagFileProcessorProcess, uuid7, file, selector, logger, log_file, client)
               for _ in range(parses)]
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(file), bundle_path=file.parent, bundle_name="bench", load_op_links=False)
    [stat] = bag.dagbag_stats
    serialized, errors = samples[-1][1], samples[-1][2]
    return {"processor_s": [s[0] for s in samples], "dagbag_s": stat.duration.total_seconds(), "dags": serialized,
            "tasks": stat.task_num, "import_errors": errors or dict(bag.import_errors)}


def _parse_once(DagFileProcessorProcess, uuid7, file, selector, logger, log_file, client):  # noqa: N803
    proc = DagFileProcessorProcess.start(
        id=uuid7(), path=str(file), bundle_path=file.parent, bundle_name="bench", dag_file_rel_path=file.name,
        callbacks=[], selector=selector, logger=logger, logger_filehandle=log_file, subprocess_logs_to_stdout=False,
        client=client,
    )
    # The manager's _service_processor_sockets loop, but polled every 10 ms: the manager's own loop runs about
    # once a second, so the last_duration it records is rounded up to its next iteration.
    while not proc.is_ready:
        for key, _ in selector.select(timeout=POLL_S):
            handler, on_close = key.data
            try:
                need_more = handler(key.fileobj)
            except (BrokenPipeError, ConnectionResetError):
                need_more = False
            if not need_more:
                on_close(key.fileobj)
                key.fileobj.close()
    processor_s = time.monotonic() - proc.start_time  # exactly what handle_parsing_result records
    result = proc.parsing_result
    proc.close()
    serialized = len(result.serialized_dags) if result else 0
    errors = dict(result.import_errors or {}) if result else {"<no result>": "the parser sent nothing"}
    return processor_s, serialized, errors


def measure_fresh(path: Path, env: dict[str, str], parses: int) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.dag_parse_time", "--child", str(path), "--parses",
                           str(parses)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"parsing {path.name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argument_parser(__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: measure one file in this process
    parser.add_argument("--repeats", type=int, default=None, help="rounds: a fresh process per file per round")
    parser.add_argument("--parses", type=int, default=None, help="DAG-processor parses (forks) per process")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure_in_this_process(args.child, args.parses or 1)))
        return
    repeats = args.repeats or (1 if args.quick else 3)
    parses = args.parses or (2 if args.quick else 3)
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="mtc-bench-parse-") as scratch:
        home = Path(scratch) / "airflow"
        home.mkdir()
        references = {"empty": EMPTY_DAG, "one_task": ONE_TASK_DAG,
                      "peer": peer_dag(REPO / "dags" / "mtc_resilient_training.py"),
                      "training_without_form": without_form(REPO / "dags" / "mtc_resilient_training.py")}
        if args.quick:
            references.pop("empty"), references.pop("peer"), references.pop("training_without_form")
        files: dict[str, Path] = {}
        for name, text in references.items():
            files[name] = Path(scratch) / f"{name}_dag.py"
            files[name].write_text(text)
        chosen = QUICK_DAGS if args.quick else DAGS
        files.update({name: REPO / "dags" / name for name in chosen})
        # Bytecode cached, as in a deployment: PYTHONDONTWRITEBYTECODE off, and the first parse of each file
        # (discarded) writes the .pyc of the DAG file and of every module it imports.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update({"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                    "AIRFLOW__CORE__UNIT_TEST_MODE": "False", "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING"})
        runs = interleaved({name: (lambda p=path: measure_fresh(p, env, parses)) for name, path in files.items()},
                           repeats)
    warm_up = {name: values[0]["processor_s"].pop(0) for name, values in runs.items()}
    summary: dict[str, Any] = {}
    for name, values in runs.items():
        errors = [v["import_errors"] for v in values if v["import_errors"]]
        summary[name] = {"processor_s": median([x for v in values for x in v["processor_s"]]),
                         "samples": sum(len(v["processor_s"]) for v in values),
                         "dagbag_s": median([v["dagbag_s"] for v in values]),
                         "dags": values[0]["dags"], "tasks": values[0]["tasks"], "import_errors": errors[:1]}
    for name, data in summary.items():
        data["ratio_one_task"] = ratio(data["processor_s"], summary["one_task"]["processor_s"])
        data["dagbag_ratio_one_task"] = ratio(data["dagbag_s"], summary["one_task"]["dagbag_s"])
        if "peer" in summary:
            data["ratio_peer"] = ratio(data["processor_s"], summary["peer"]["processor_s"])
        if "empty" in summary:
            data["ratio_empty"] = ratio(data["processor_s"], summary["empty"]["processor_s"])
        parsed = not data["import_errors"] and data["dags"] > 0
        data["goal_one_task_met"] = parsed and data["ratio_one_task"] is not None \
            and data["ratio_one_task"] <= GOAL_ONE_TASK
        data["goal_peer_met"] = (parsed and data["ratio_peer"] <= GOAL_PEER) if data.get("ratio_peer") else None
    print_table(f"DAG parse time (bytecode cached, gc.freeze before the fork): {repeats} rounds x {parses} parses, "
                f"first discarded, medians", ["file", "tasks", "DAG processor s", "/ one @task", "/ peer", "/ empty", "DagBag s",
                               "import errors", "<= 1.2x @task", "<= peer"],
                [[n, d["tasks"], d["processor_s"], d["ratio_one_task"], d.get("ratio_peer"), d.get("ratio_empty"),
                  d["dagbag_s"], len(d["import_errors"]), d["goal_one_task_met"], d["goal_peer_met"]]
                 for n, d in summary.items()])
    result = {"parameters": {"repeats": repeats, "parses_per_process": parses, "goal_ratio_one_task": GOAL_ONE_TASK, "goal_ratio_peer": GOAL_PEER,
                             "files": list(files), "bytecode_cached": True, "gc_freeze": True},
              "load_average_at_start": load_before, "warm_up_s": warm_up, "runs": runs, "summary": summary,
              "goal_met": all(summary[name]["goal_one_task_met"] and summary[name]["goal_peer_met"] is not False
                              for name in chosen)}
    path = write_result(result_path("dag_parse_time", args.quick, args.output), "dag_parse_time", result)
    print(f"result: {path}")


if __name__ == "__main__":
    main()
