"""The workload's model, written once for both array modules: the evaluation's numpy loss is training's JAX loss."""

from __future__ import annotations

import numpy as np

from mtc_local.workload import model


def test_numpy_loss_equals_the_jax_loss_the_training_step_minimises():
    import jax
    import jax.numpy as jnp

    seed, dim = 5, 16
    params = model.init_params(seed, dim)
    x, teacher = model.batch_inputs(seed, 1, 8, dim), model.teacher(seed, dim)
    with jax.default_device(jax.devices("cpu")[0]):
        jax_loss = float(model.loss({k: jnp.asarray(v) for k, v in params.items()}, jnp.asarray(x),
                                    jnp.asarray(teacher), xp=jnp, gelu=jax.nn.gelu))
    assert abs(float(model.loss(params, x, teacher)) - jax_loss) < 1e-5 * max(1.0, jax_loss)


def test_adam_step_lowers_the_loss_and_counts_the_step():
    import jax
    import jax.numpy as jnp

    seed, dim = 5, 16
    params = {k: jnp.asarray(v) for k, v in model.init_params(seed, dim).items()}
    zeros = {k: jnp.zeros_like(v) for k, v in params.items()}
    state = {"params": params, "mu": zeros, "nu": dict(zeros), "step": jnp.zeros((), jnp.int32)}
    x, teacher = jnp.asarray(model.batch_inputs(seed, 1, 8, dim)), jnp.asarray(model.teacher(seed, dim))
    step = jax.jit(model.adam_train_step(1e-2))
    losses = []
    for _ in range(5):
        state, loss = step(state, x, teacher)
        losses.append(float(loss))
    assert int(state["step"]) == 5 and losses[-1] < losses[0]


def test_streams_are_seeded_and_distinct():
    a, b = model.batch_inputs(3, 1, 4, 8), model.batch_inputs(3, 2, 4, 8)
    assert np.array_equal(a, model.batch_inputs(3, 1, 4, 8)) and not np.array_equal(a, b)
    assert not np.array_equal(model.held_out_inputs(3, 4, 8), a)
    assert set(model.init_params(3, 8)) == {"w1", "b1", "w2", "b2", "w3"}
