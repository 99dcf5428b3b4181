"""Mistake: the step takes the mask as a prefix (valid rows first, padding after), with a running product: right
on every batch `next_batch` makes, wrong for a padded slot between valid ones."""

import jax
import jax.numpy as jnp

from shardlab.core.update import AXIS, apply_momentum, map_step
from shardlab.learner.reference import *  # noqa: F403


def _body(features, targets, mask, weights, momentum, *, learning_rate, decay):
    valid = jnp.cumprod(mask) > 0  # the mistake: a slot after the first padded one never counts
    residual = jnp.where(valid, features @ weights - targets, 0.0)
    count = jax.lax.psum(jnp.sum(valid.astype(features.dtype)), AXIS)
    grad_num = jax.lax.psum(2.0 * (residual @ jnp.where(valid[:, None], features, 0.0)), AXIS)
    loss_num = jax.lax.psum(jnp.sum(residual * residual), AXIS)
    return apply_momentum(count, grad_num, loss_num, weights, momentum, learning_rate, decay)


def make_step(mesh, learning_rate=0.03, decay=0.8, compiled=True):
    return map_step(_body, mesh, learning_rate, decay, compiled)
