"""Two mistakes at once: the gradient lacks the factor 2 of d(r^2)/dw, and momentum decays by 0.9, not 0.8."""

import jax
import jax.numpy as jnp

from shardlab.core.config import LEARNING_RATE
from shardlab.core.update import map_step
from shardlab.learner.reference import *  # noqa: F403


def _body(features, targets, mask, weights, momentum, *, learning_rate, decay):
    valid = mask > 0
    residual = jnp.where(valid, features @ weights - targets, 0.0)
    count = jax.lax.psum(jnp.sum(valid.astype(features.dtype)), "data")
    grad = jax.lax.psum(residual @ jnp.where(valid[:, None], features, 0.0), "data") / count
    loss = jax.lax.psum(jnp.sum(residual * residual), "data") / count
    momentum = 0.9 * momentum + grad
    return weights - learning_rate * momentum, momentum, loss, grad


def make_step(mesh, learning_rate=LEARNING_RATE, decay=0.8, compiled=True):
    return map_step(_body, mesh, learning_rate, decay, compiled)
