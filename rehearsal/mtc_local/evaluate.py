"""Evaluate a persistent checkpoint of the local workload: restore it with Orbax and compute a held-out loss.

The evaluation DAG runs this for each new checkpoint the asset watcher announces. It restores the saved
train state into host numpy arrays (no devices, no jax.distributed) and runs the workload's model in numpy
on a batch the training never sees (`workload.model`, the held-out stream).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from mtc_local.workload import model

ITEM_NAMES = ("default", "state")  # emergency manager's persistent item; one-slice / plain managers


def item_directory(step_dir: Path) -> Path:
    for name in ITEM_NAMES:
        if (step_dir / name).is_dir():
            return step_dir / name
    raise FileNotFoundError(f"{step_dir} holds none of the items {', '.join(ITEM_NAMES)}")


def restore_state(step_dir: str | Path) -> dict[str, Any]:
    import jax
    import orbax.checkpoint as ocp

    item = item_directory(Path(step_dir))
    checkpointer = ocp.PyTreeCheckpointer()
    tree = checkpointer.metadata(item).item_metadata.tree
    args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    return checkpointer.restore(item, restore_args=args)


def held_out_loss(params: dict[str, np.ndarray], seed: int, batch_size: int = 256) -> float:
    d = params["w3"].shape[0]
    return float(model.loss(params, model.held_out_inputs(seed, batch_size, d), model.teacher(seed, d)))


def evaluate_checkpoint(checkpoint_dir: str, step: int, seed: int = 0) -> dict[str, Any]:
    """Restore `<checkpoint_dir>/<step>` and report its held-out loss and a fingerprint of its parameters."""
    state = restore_state(Path(checkpoint_dir) / str(step))
    params = {k: np.asarray(v) for k, v in state["params"].items()}
    digest = hashlib.sha256(b"".join(params[k].tobytes() for k in sorted(params))).hexdigest()
    return {
        "step": int(np.asarray(state["step"])),
        "held_out_loss": held_out_loss(params, seed),
        "params_sha256": digest,
        "parameters": int(sum(v.size for v in params.values())),
    }
