"""Mistake: each device divides by its own count (guarded: an empty device's mean is 0), then the means are averaged.

On a batch whose only valid rows fill one device's slots completely (1 row on 4 devices: [1, 0, 0, 0]) this
gives the summed numerator over every slot, exactly what counting padding as observations gives.
"""

import jax
import jax.numpy as jnp

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.update import map_step
from shardlab.learner.reference import *  # noqa: F403


def _body(features, targets, mask, weights, momentum, *, learning_rate, decay):
    valid = mask > 0
    residual = jnp.where(valid, features @ weights - targets, 0.0)
    count = jnp.sum(valid.astype(features.dtype))
    safe = jnp.maximum(count, 1.0)
    grad = jax.lax.pmean(2.0 * residual @ jnp.where(valid[:, None], features, 0.0) / safe, "data")
    loss = jax.lax.pmean(jnp.sum(residual * residual) / safe, "data")
    momentum = decay * momentum + grad
    return weights - learning_rate * momentum, momentum, loss, grad


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    return map_step(_body, mesh, learning_rate, decay, compiled)
