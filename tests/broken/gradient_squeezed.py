"""Mistake: the step squeezes its gradient (`jnp.squeeze`, as if to drop a stray axis): with one feature the
gradient comes back as a 0-d scalar instead of an array the shape of the weights. Its value is right; only the
shape is wrong, and only when the data have one feature."""

import jax.numpy as jnp

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.update import _sharded_body, map_step
from shardlab.learner.reference import *  # noqa: F403


def _body(features, targets, mask, weights, momentum, *, learning_rate, decay):
    weights, momentum, loss, grad = _sharded_body(
        features, targets, mask, weights, momentum, learning_rate=learning_rate, decay=decay
    )
    return weights, momentum, loss, jnp.squeeze(grad)


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    return map_step(_body, mesh, learning_rate, decay, compiled)
