"""Checkpoint evaluation: runs once per new persistent checkpoint of the training run.

Scheduled on the run's checkpoint asset. The asset's watcher (a trigger in the triggerer) records an asset
event as soon as a step is finalized, not when the training task ends; each event queues this DAG. Which run
it follows is set by MTC_EVAL_RUN_NAME and MTC_EVAL_CHECKPOINT_DIR (default: the local target's `mtc-demo` run).

- Local checkpoint directory: `evaluate` restores each announced checkpoint with Orbax and reports a
  held-out loss.
- gs:// checkpoint directory: `plan_eval` picks the newest announced step and `evaluate_on_gke` runs a
  one-shot evaluation JobSet on GKE (MaxText's decode entry with load_parameters_path=<step>/items), done
  when the JobSet completes (wait_for="completion"); a retryable failure is resubmitted by Airflow's retries.
  Cluster and workload come from MTC_EVAL_PROJECT_ID, MTC_EVAL_LOCATION, MTC_EVAL_CLUSTER, MTC_EVAL_IMAGE,
  MTC_EVAL_NAMESPACE and MTC_EVAL_SLICES (JSON SliceSpec fields). Before each evaluation `readiness` checks the
  cluster, with the CheckpointConfiguration MTC_EVAL_CHECKPOINT_CONFIGURATION (default mtc-checkpoint-config):
  its nodeSelector must select the slices' machine type and its bucket must be the checkpoints' bucket.

This file imports only Airflow's SDK and the provider's thin glue at parse time.
"""

from __future__ import annotations

import datetime
import json
import os

from airflow.sdk import DAG, task

from mtc_provider.assets import checkpoint_asset
from mtc_provider.core.definition.render.maxtext import maxtext_command
from mtc_provider.dag_support import planned
from mtc_provider.target import default_local_home

RUN_NAME = os.environ.get("MTC_EVAL_RUN_NAME", "mtc-demo")
CHECKPOINT_DIR = os.environ.get(
    "MTC_EVAL_CHECKPOINT_DIR", f"{default_local_home()}/buckets/mtc-checkpoints/{RUN_NAME}/checkpoints"
)
ON_GKE = CHECKPOINT_DIR.startswith("gs://")
# The smallest v6e Multislice GKE runs: GKE Multislice needs multi-host slices (2x4 on ct6e-standard-4t: 2 hosts).
DEFAULT_EVAL_SLICES = {"tpu_type": "v6e", "topology": "2x4", "num_slices": 2}
EVAL_COMMAND = list(maxtext_command(entry="decode"))  # the current MaxText release (docs/maxtext.md)
checkpoints = checkpoint_asset(CHECKPOINT_DIR, RUN_NAME, poll_interval=5)

with DAG(
    dag_id="mtc_checkpoint_evaluation",
    description="Restore each new checkpoint of a training run and report a held-out metric",
    schedule=[checkpoints],
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    # On GKE every run evaluates under one run name: a second live evaluation JobSet would be refused.
    **({"max_active_runs": 1} if ON_GKE else {}),
    render_template_as_native_obj=True,
    tags=["mtc", "evaluation"],
) as dag:
    if ON_GKE:
        from mtc_provider.operators.gcp import MtcClusterReadinessOperator
        from mtc_provider.operators.jobset import MtcJobSetOperator

        EVAL_TARGET = {"kind": "gke", "project_id": os.environ.get("MTC_EVAL_PROJECT_ID", ""),
                       "location": os.environ.get("MTC_EVAL_LOCATION", ""),
                       "cluster_name": os.environ.get("MTC_EVAL_CLUSTER", "")}
        EVAL_SLICES = json.loads(os.environ.get("MTC_EVAL_SLICES") or json.dumps(DEFAULT_EVAL_SLICES))
        BUCKET = CHECKPOINT_DIR[len("gs://"):].split("/", 1)[0]

        @task
        def plan_eval(triggering_asset_events=None) -> dict:
            """The newest checkpoint announced since the last run (events can arrive together): evaluate that one."""
            from airflow.sdk.exceptions import AirflowFailException

            from mtc_provider.assets import checkpoint_from_event

            announced = [checkpoint_from_event(event)
                         for events in (triggering_asset_events or {}).values() for event in events]
            if not announced:
                raise AirflowFailException("no checkpoint asset event triggered this run: nothing to evaluate")
            newest = max(announced, key=lambda c: c.step)
            # MaxText keeps a step's model state under <step>/items; load_parameters_path takes the params from it.
            return {"step": newest.step, "path": newest.path, "jobset_name": f"eval-s{newest.step}",
                    "load_parameters_path": f"{newest.path.rstrip('/')}/items"}

        evaluate_on_gke = MtcJobSetOperator(
            task_id="evaluate_on_gke",
            wait_for="completion",
            target=EVAL_TARGET,
            slices=EVAL_SLICES,
            checkpointing={"run_name": f"{RUN_NAME}-eval",
                           "base_output_directory": f"gs://{BUCKET}",
                           "steps": 1, "enable_checkpointing": False},
            workload={"jobset_name": planned("jobset_name", task_id="plan_eval"),
                      "image": os.environ.get("MTC_EVAL_IMAGE", ""),
                      "namespace": os.environ.get("MTC_EVAL_NAMESPACE", "default"),
                      "command": EVAL_COMMAND,
                      "extra_flags": {"load_parameters_path": planned("load_parameters_path", task_id="plan_eval")}},
            retries=2,
            retry_delay=datetime.timedelta(seconds=30),
        )
        readiness = MtcClusterReadinessOperator(
            task_id="readiness", target=EVAL_TARGET, slices=EVAL_SLICES, bucket_name=BUCKET,
            checkpoint_configuration_name=os.environ.get("MTC_EVAL_CHECKPOINT_CONFIGURATION", "mtc-checkpoint-config"),
            retries=0,
        )
        plan_eval() >> readiness >> evaluate_on_gke
    else:

        @task
        def evaluate(triggering_asset_events=None) -> list[dict]:
            """Evaluate every checkpoint announced since the last run (events can arrive together)."""
            from mtc_provider.assets import checkpoint_from_event
            from mtc_local.evaluate import evaluate_checkpoint

            results = []
            for events in (triggering_asset_events or {}).values():
                for event in events:
                    checkpoint = checkpoint_from_event(event)
                    result = evaluate_checkpoint(checkpoint.checkpoint_dir, checkpoint.step)
                    print(f"checkpoint step {result['step']}: held-out loss {result['held_out_loss']:.5f}")
                    results.append(result)
            return results

        evaluate()
