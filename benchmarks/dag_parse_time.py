"""Benchmark 5: DAG parse time of each sample DAG vs an empty DAG file, as Airflow's DAG processor times it.

Each measurement is a fresh Python process (no module cached from an earlier parse) that does what Airflow
3.3's `DagFileProcessorManager` does for one file: `DagFileProcessorProcess.start(...)` forks a parser that
imports the file with `BundleDagBag`, serializes its DAGs and sends them back; the manager records
`time.monotonic() - proc.start_time` as the file's `DagFileStat.last_duration` (the `dag_processing.
last_duration` metric); here the result is collected every 10 ms instead of on the manager's ~1 s loop. The
same process then loads the file with `DagBag` and records its `dagbag_stats` duration (what `airflow dags
report` prints). Files are measured round-robin, the order reversed every
round; the result is the median per file and its ratio to the empty DAG's (and, for reference, to a plain
Airflow DAG with one TaskFlow task). Goal: <= 1.5x the empty DAG.

    python -m benchmarks.dag_parse_time [--quick]
"""

from __future__ import annotations

import argparse
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
QUICK_DAGS = ("mtc_checkpoint_evaluation.py",)  # --quick: one DAG and the empty one, once each
GOAL = 1.5
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


def measure_in_this_process(path: str) -> dict[str, Any]:
    """Parse `path` the way the DAG processor does, then with DagBag; both timed by Airflow's own code paths."""
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

    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(file), bundle_path=file.parent, bundle_name="bench", load_op_links=False)
    [stat] = bag.dagbag_stats
    return {"processor_s": processor_s, "dagbag_s": stat.duration.total_seconds(), "dags": serialized,
            "tasks": stat.task_num, "import_errors": errors or dict(bag.import_errors)}


def measure_fresh(path: Path, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.dag_parse_time", "--child", str(path)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"parsing {path.name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argument_parser(__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: measure one file in this process
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure_in_this_process(args.child)))
        return
    repeats = args.repeats or (1 if args.quick else 7)
    with tempfile.TemporaryDirectory(prefix="mtc-bench-parse-") as scratch:
        home = Path(scratch) / "airflow"
        home.mkdir()
        empty = Path(scratch) / "empty_dag.py"
        empty.write_text(EMPTY_DAG)
        one_task = Path(scratch) / "one_task_dag.py"
        one_task.write_text(ONE_TASK_DAG)
        env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
               "AIRFLOW__CORE__UNIT_TEST_MODE": "False", "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
               "PYTHONDONTWRITEBYTECODE": "1"}
        chosen = QUICK_DAGS if args.quick else DAGS
        files = {"empty": empty, **({} if args.quick else {"one_task": one_task}),
                 **{name: REPO / "dags" / name for name in chosen}}
        runs = interleaved({name: (lambda p=path: measure_fresh(p, env)) for name, path in files.items()}, repeats)
    summary: dict[str, Any] = {}
    for name, values in runs.items():
        errors = [v["import_errors"] for v in values if v["import_errors"]]
        summary[name] = {"processor_s": median([v["processor_s"] for v in values]),
                         "dagbag_s": median([v["dagbag_s"] for v in values]),
                         "dags": values[0]["dags"], "tasks": values[0]["tasks"], "import_errors": errors[:1]}
    for name, data in summary.items():
        data["processor_ratio"] = ratio(data["processor_s"], summary["empty"]["processor_s"])
        data["dagbag_ratio"] = ratio(data["dagbag_s"], summary["empty"]["dagbag_s"])
        if "one_task" in summary:
            data["processor_ratio_one_task"] = ratio(data["processor_s"], summary["one_task"]["processor_s"])
        data["goal_met"] = (data["processor_ratio"] is not None and data["processor_ratio"] <= GOAL
                            and not data["import_errors"] and data["dags"] > 0)
    print_table(f"DAG parse time, fresh process each, median of {repeats}",
                ["file", "DAG processor s", "ratio", "ratio to one_task", "DagBag s", "ratio", "dags", "tasks",
                 "import errors", "<= 1.5x"],
                [[n, d["processor_s"], d["processor_ratio"], d.get("processor_ratio_one_task"), d["dagbag_s"],
                  d["dagbag_ratio"], d["dags"], d["tasks"], len(d["import_errors"]), d["goal_met"]]
                 for n, d in summary.items()])
    result = {"parameters": {"repeats": repeats, "goal_ratio": GOAL, "files": list(files)},
              "runs": runs, "summary": summary,
              "goal_met": all(summary[name]["goal_met"] for name in chosen)}
    path = write_result(result_path("dag_parse_time", args.quick, args.output), "dag_parse_time", result)
    print(f"result: {path}")


if __name__ == "__main__":
    main()
