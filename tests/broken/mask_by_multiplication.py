"""Mistake: padding is removed by multiplying with the mask, so NaN or infinity in a padded slot (mask 0) reaches
the gradient and the loss (0 x NaN is NaN)."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.learner.reference import *  # noqa: F403


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    def body(features, targets, mask, weights, momentum):
        residual = (features @ weights - targets) * mask
        count = jax.lax.psum(jnp.sum(mask), "data")
        grad = jax.lax.psum(2.0 * features.T @ residual, "data") / count
        loss = jax.lax.psum(jnp.sum(residual**2), "data") / count
        momentum = decay * momentum + grad
        return weights - learning_rate * momentum, momentum, loss, grad

    mapped = jax.shard_map(body, mesh=mesh, in_specs=(P("data", None), P("data"), P("data"), P(), P()), out_specs=P())
    return jax.jit(mapped) if compiled else mapped
