"""Mistake: the step zeroes gradient entries below 1e-9 in magnitude as float noise, so on data of small magnitude
the gradient and the momentum stay zero and the weights do not move."""

import jax
import jax.numpy as jnp

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.update import apply_momentum, local_sums, map_step
from shardlab.learner.reference import *  # noqa: F403


def _body(features, targets, mask, weights, momentum, *, learning_rate, decay):
    count, grad_num, loss_num = (jax.lax.psum(s, "data") for s in local_sums(features, targets, mask, weights))
    grad_num = jnp.where(jnp.abs(grad_num / count) < 1e-9, 0.0, grad_num)  # drop float noise
    return apply_momentum(count, grad_num, loss_num, weights, momentum, learning_rate, decay)


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    return map_step(_body, mesh, learning_rate, decay, compiled)
