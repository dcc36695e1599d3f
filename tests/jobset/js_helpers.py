"""Helpers shared by the JobSet tests."""

from __future__ import annotations

from pathlib import Path

from mtc_provider.adapters.protocols import CheckpointInfo


def jobset_body(name: str = "train", labels: dict | None = None) -> dict:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": dict(labels or {"app": "train"})},
        "spec": {"replicatedJobs": [{"name": "slice", "replicas": 2, "template": {"spec": {}}}]},
    }


class DirStore:
    """A tiny CheckpointStore over a local directory: <dir>/<step>/commit_success.txt marks a finalized step."""

    def finalized_steps(self, checkpoint_dir: str) -> list[CheckpointInfo]:
        root = Path(checkpoint_dir)
        if not root.is_dir():
            return []
        steps = sorted(int(p.name) for p in root.iterdir() if p.name.isdigit() and (p / "commit_success.txt").exists())
        return [CheckpointInfo(step, str(root / str(step))) for step in steps]

    def latest_step(self, checkpoint_dir: str) -> int | None:
        steps = self.finalized_steps(checkpoint_dir)
        return steps[-1].step if steps else None


def finalize(checkpoint_dir: str, step: int) -> None:
    path = Path(checkpoint_dir) / str(step)
    path.mkdir(parents=True, exist_ok=True)
    (path / "commit_success.txt").write_text("ok")
