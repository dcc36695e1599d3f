"""Helpers shared by the JobSet tests."""

from __future__ import annotations

from pathlib import Path

from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore


def jobset_body(name: str = "train", labels: dict | None = None) -> dict:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": dict(labels or {"app": "train"})},
        "spec": {"replicatedJobs": [{"name": "slice", "replicas": 2, "template": {"spec": {}}}]},
    }


def finalize(checkpoint_dir: str, step: int) -> None:
    path = Path(checkpoint_dir) / str(step)
    path.mkdir(parents=True, exist_ok=True)
    (path / "commit_success.txt").write_text("ok")


class FakeTI:
    """The task instance fields the launch operator reads, and the XComs it pushes (for fast, DB-free tries)."""

    def __init__(self, dag_id: str = "dag", run_id: str = "run-1", task_id: str = "train", try_number: int = 1,
                 max_tries: int = 6) -> None:
        self.dag_id, self.run_id, self.task_id = dag_id, run_id, task_id
        self.try_number, self.max_tries = try_number, max_tries
        self.xcoms: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.xcoms[key] = value

    def xcom_pull(self, task_ids: str | None = None, key: str = "return_value") -> object:
        """What this run's launch task pushed (one FakeTI stands for the run's tasks, as the teardown reads it)."""
        return self.xcoms.get(key)


def launch(checkpoint_dir_home: str, **overrides):
    """A launch operator on the in-memory cluster ("local" kind) with a LocalCheckpointStore, synchronous unless told."""
    from mtc_provider.operators.jobset import MtcJobSetOperator

    kwargs = dict(
        task_id="train",
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": "llama", "base_output_directory": f"{checkpoint_dir_home}/out", "steps": 100,
                       "checkpoint_period": 20},
        workload={"jobset_name": "train", "max_restarts": 2},
        target={"kind": "local", "home": f"{checkpoint_dir_home}/home"},
        checkpoint_store_factory=lambda directory, conn_id: LocalCheckpointStore(),
        deferrable=False, poll_interval=0, retries=6,
    )
    kwargs.update(overrides)
    return MtcJobSetOperator(**kwargs)


def run_try(op, ti: FakeTI):
    """One try: execute with a context holding the task instance; returns the result or raises."""
    return op.execute({"ti": ti, "run_id": ti.run_id})


def ckpt_dir(tmp_path) -> str:
    """The checkpoint directory of the sample run these tests launch (run `llama` under `out/`)."""
    return str(tmp_path / "out" / "llama" / "checkpoints")


def reach(tmp_path, step: int, status: dict):
    """A cluster script frame: finalize `step` in the run's checkpoint directory, then report `status`."""
    def frame(obj):
        finalize(ckpt_dir(tmp_path), step)
        return status
    return frame
