"""Checkpoint evaluation: runs once per new persistent checkpoint of the training run.

Scheduled on the run's checkpoint asset. The asset's watcher (a trigger in the triggerer) records an asset
event as soon as a step is finalized, not when the training task ends; each event queues this DAG, which
restores that checkpoint with Orbax and reports a held-out loss (local target). Which run it follows is set
by MTC_EVAL_RUN_NAME and MTC_EVAL_CHECKPOINT_DIR (default: the local target's `mtc-demo` run).
"""

from __future__ import annotations

import datetime
import os

from airflow.sdk import DAG, task

from mtc_provider.assets import checkpoint_asset
from mtc_provider.target import default_local_home

RUN_NAME = os.environ.get("MTC_EVAL_RUN_NAME", "mtc-demo")
CHECKPOINT_DIR = os.environ.get(
    "MTC_EVAL_CHECKPOINT_DIR", f"{default_local_home()}/buckets/mtc-checkpoints/{RUN_NAME}/checkpoints"
)
checkpoints = checkpoint_asset(CHECKPOINT_DIR, RUN_NAME, poll_interval=5)

with DAG(
    dag_id="mtc_checkpoint_evaluation",
    description="Restore each new checkpoint of a training run and report a held-out metric",
    schedule=[checkpoints],
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    tags=["mtc", "evaluation"],
) as dag:

    @task
    def evaluate(triggering_asset_events=None) -> list[dict]:
        """Evaluate every checkpoint announced since the last run (events can arrive together)."""
        from airflow.exceptions import AirflowFailException

        from mtc_provider.assets import checkpoint_from_event

        results = []
        for events in (triggering_asset_events or {}).values():
            for event in events:
                checkpoint = checkpoint_from_event(event)
                if checkpoint.checkpoint_dir.startswith("gs://"):
                    raise AirflowFailException(
                        "evaluating gs:// checkpoints needs an evaluation JobSet on GKE; this sample evaluates "
                        "local-target checkpoints only"
                    )
                from mtc_provider.local.evaluate import evaluate_checkpoint

                result = evaluate_checkpoint(checkpoint.checkpoint_dir, checkpoint.step)
                print(f"checkpoint step {result['step']}: held-out loss {result['held_out_loss']:.5f}")
                results.append(result)
        return results

    evaluate()
