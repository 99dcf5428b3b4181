"""Mistake: the gradient comes from jax.grad inside shard_map and is then summed over devices again.

With the weights replicated (P()), autodiff already adds the weights' cotangent over 'data', so the
gradient it returns is the global sum of the devices' gradients; the psum below adds that sum once more,
once per device: the gradient is the device count times the course's, on every batch. The loss is right.
"""

import jax
import jax.numpy as jnp

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.update import apply_momentum, map_step
from shardlab.learner.reference import *  # noqa: F403


def _squared_error_sum(weights, features, targets, valid):
    rows = jnp.where(valid[:, None], features, 0.0)
    residual = jnp.where(valid, rows @ weights - jnp.where(valid, targets, 0.0), 0.0)
    return jnp.sum(residual * residual)


def _body(features, targets, mask, weights, momentum, *, learning_rate, decay):
    valid = mask > 0
    count = jax.lax.psum(jnp.sum(valid.astype(features.dtype)), "data")
    loss_num, grad_num = jax.value_and_grad(_squared_error_sum)(weights, features, targets, valid)
    loss_num = jax.lax.psum(loss_num, "data")
    grad_num = jax.lax.psum(grad_num, "data")  # a second sum: autodiff has already added it over 'data'
    return apply_momentum(count, grad_num, loss_num, weights, momentum, learning_rate, decay)


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    return map_step(_body, mesh, learning_rate, decay, compiled)
