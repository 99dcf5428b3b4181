"""Mistake: each device takes its own mean and the means are re-weighted by count (0/0 on an empty device)."""

import jax
import jax.numpy as jnp

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.update import map_step
from shardlab.learner.reference import *  # noqa: F403


def _body(features, targets, mask, weights, momentum, *, learning_rate, decay):
    valid = mask > 0
    residual = jnp.where(valid, features @ weights - targets, 0.0)
    count = jnp.sum(valid.astype(features.dtype))
    local_grad = 2.0 * residual @ jnp.where(valid[:, None], features, 0.0) / count
    local_loss = jnp.sum(residual * residual) / count
    total = jax.lax.psum(count, "data")
    grad = jax.lax.psum(count * local_grad, "data") / total
    loss = jax.lax.psum(count * local_loss, "data") / total
    momentum = decay * momentum + grad
    return weights - learning_rate * momentum, momentum, loss, grad


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    return map_step(_body, mesh, learning_rate, decay, compiled)
