"""Mistake: gradient entries below 1e-9 in magnitude are zeroed as "float noise": on data of small magnitude the
whole gradient is that small, so momentum and weights never move."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.learner.reference import *  # noqa: F403


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    def body(features, targets, mask, weights, momentum):
        valid = mask > 0
        residual = jnp.where(valid, features @ weights - targets, 0.0)
        count = jax.lax.psum(jnp.sum(valid.astype(jnp.float32)), "data")
        grad = jax.lax.psum(2.0 * features.T @ residual, "data") / count
        grad = jnp.where(jnp.abs(grad) < 1e-9, 0.0, grad)
        loss = jax.lax.psum(jnp.sum(residual**2), "data") / count
        momentum = decay * momentum + grad
        return weights - learning_rate * momentum, momentum, loss, grad

    mapped = jax.shard_map(body, mesh=mesh, in_specs=(P("data", None), P("data"), P("data"), P(), P()), out_specs=P())
    return jax.jit(mapped) if compiled else mapped
