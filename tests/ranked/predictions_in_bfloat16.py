"""Mistake: the step computes its predictions with bfloat16 operands ("a fast path"), then continues in float32:
every residual carries bfloat16's rounding (8 significant bits), so loss and gradient are off by about 1e-3
relative, with no constant factor and the same on every device count."""

import jax
import jax.numpy as jnp

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.devices import AXIS
from shardlab.core.update import apply_momentum, map_step
from shardlab.learner.reference import *  # noqa: F403


def _body(features, targets, mask, weights, momentum, *, learning_rate, decay):
    valid = mask > 0
    predictions = (features.astype(jnp.bfloat16) @ weights.astype(jnp.bfloat16)).astype(jnp.float32)
    residual = jnp.where(valid, predictions - targets, 0.0)
    count = jax.lax.psum(jnp.sum(valid.astype(features.dtype)), AXIS)
    grad_num = jax.lax.psum(2.0 * (residual @ jnp.where(valid[:, None], features, 0.0)), AXIS)
    loss_num = jax.lax.psum(jnp.sum(residual * residual), AXIS)
    return apply_momentum(count, grad_num, loss_num, weights, momentum, learning_rate, decay)


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    return map_step(_body, mesh, learning_rate, decay, compiled)
