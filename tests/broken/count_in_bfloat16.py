"""Mistake: the valid count is summed from a bfloat16 mask ("half the memory"): bfloat16 holds integers exactly only up
to 256, so a device with more valid rows divides loss and gradient by a rounded count."""

import jax
import jax.numpy as jnp

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.update import apply_momentum, local_sums, map_step
from shardlab.learner.reference import *  # noqa: F403


def _body(features, targets, mask, weights, momentum, *, learning_rate, decay):
    _, grad_num, loss_num = local_sums(features, targets, mask, weights)
    count = jnp.sum((mask > 0).astype(jnp.bfloat16)).astype(jnp.float32)
    count, grad_num, loss_num = (jax.lax.psum(x, "data") for x in (count, grad_num, loss_num))
    return apply_momentum(count, grad_num, loss_num, weights, momentum, learning_rate, decay)


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    return map_step(_body, mesh, learning_rate, decay, compiled)
