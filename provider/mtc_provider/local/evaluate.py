"""Evaluate a persistent checkpoint of the local workload: restore it with Orbax and compute a held-out loss.

The evaluation DAG runs this for each new checkpoint the asset watcher announces. It restores the saved
train state into host numpy arrays (no devices, no jax.distributed) and runs the workload's model in numpy
on a batch the training never sees (derived from the seed like the workload's data, in another stream).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np

HELD_OUT_STREAM = 4  # the workload uses streams 1 (init), 2 (teacher), 3 (batches)
ITEM_NAMES = ("default", "state")  # emergency manager's persistent item; one-slice / plain managers


def _gelu(x: np.ndarray) -> np.ndarray:
    # jax.nn.gelu's default tanh approximation
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


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
    teacher = (np.random.default_rng([seed, 2]).standard_normal((d, d)) / np.sqrt(d)).astype(np.float32)
    x = np.random.default_rng([seed, HELD_OUT_STREAM]).standard_normal((batch_size, d)).astype(np.float32)
    y = np.tanh(x @ teacher)
    z = _gelu(x @ params["w1"] + params["b1"])
    z = _gelu(z @ params["w2"] + params["b2"])
    return float(np.mean((z @ params["w3"] - y) ** 2))


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
