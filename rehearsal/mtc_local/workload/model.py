"""The workload's model: a three-layer MLP learning a fixed random "teacher" map, trained with Adam.

Everything is derived from the seed, one random stream per use, so every process (and the evaluation of a
checkpoint, in plain numpy) builds the same numbers without talking to the others. The loss is written once
for both array modules: ``jax.numpy`` inside the jitted training step, ``numpy`` for evaluation.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

# numpy.random streams, keyed (seed, stream[, step]).
INIT_STREAM = 1
TEACHER_STREAM = 2
BATCH_STREAM = 3
HELD_OUT_STREAM = 4  # never used in training

ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-8


def init_params(seed: int, dim: int) -> dict[str, np.ndarray]:
    d, h = dim, 4 * dim
    rng = np.random.default_rng([seed, INIT_STREAM])
    return {
        "w1": (rng.standard_normal((d, h)) / np.sqrt(d)).astype(np.float32),
        "b1": np.zeros((h,), np.float32),
        "w2": (rng.standard_normal((h, d)) / np.sqrt(h)).astype(np.float32),
        "b2": np.zeros((d,), np.float32),
        "w3": (rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32),
    }


def teacher(seed: int, dim: int) -> np.ndarray:
    return (np.random.default_rng([seed, TEACHER_STREAM]).standard_normal((dim, dim)) / np.sqrt(dim)).astype(
        np.float32)


def batch_inputs(seed: int, step: int, batch_size: int, dim: int) -> np.ndarray:
    """The global batch for update ``step`` (1-based), from (seed, step) only."""
    return np.random.default_rng([seed, BATCH_STREAM, step]).standard_normal((batch_size, dim)).astype(np.float32)


def held_out_inputs(seed: int, batch_size: int, dim: int) -> np.ndarray:
    return np.random.default_rng([seed, HELD_OUT_STREAM]).standard_normal((batch_size, dim)).astype(np.float32)


def gelu_numpy(x: np.ndarray) -> np.ndarray:
    """``jax.nn.gelu``'s default tanh approximation, in numpy."""
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def loss(params: dict[str, Any], x: Any, teacher_map: Any, xp: Any = np,
         gelu: Callable[[Any], Any] = gelu_numpy) -> Any:
    """Mean squared error of the MLP against ``tanh(x @ teacher)``; ``xp`` is numpy or jax.numpy."""
    y = xp.tanh(x @ teacher_map)
    z = gelu(x @ params["w1"] + params["b1"])
    z = gelu(z @ params["w2"] + params["b2"])
    out = z @ params["w3"]
    return xp.mean((out - y) ** 2)


def adam_train_step(learning_rate: float) -> Callable[[dict[str, Any], Any, Any], tuple[dict[str, Any], Any]]:
    """One Adam update of the train state ``{params, mu, nu, step}``, in JAX (not yet jitted)."""
    import jax
    import jax.numpy as jnp

    lr, b1, b2, eps = learning_rate, ADAM_B1, ADAM_B2, ADAM_EPS

    def loss_fn(p, x, t):
        return loss(p, x, t, xp=jnp, gelu=jax.nn.gelu)

    def train_step(state, x, t):
        value, grads = jax.value_and_grad(loss_fn)(state["params"], x, t)
        step = state["step"] + 1
        tf = step.astype(jnp.float32)
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], grads)
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state["nu"], grads)
        c1, c2 = 1 - b1**tf, 1 - b2**tf
        params = jax.tree.map(
            lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), state["params"], mu, nu
        )
        return {"params": params, "mu": mu, "nu": nu, "step": step}, value

    return train_step
