"""Mistake: the loss is expanded as sum(p^2) - 2 sum(p y) + sum(y^2); on large data float32 loses every digit."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.learner.reference import *  # noqa: F403


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    def body(features, targets, mask, weights, momentum):
        valid = mask > 0
        prediction = jnp.where(valid, features @ weights, 0.0)
        y = jnp.where(valid, targets, 0.0)
        x = jnp.where(valid[:, None], features, 0.0)
        count = jax.lax.psum(jnp.sum(valid.astype(jnp.float32)), "data")
        grad = jax.lax.psum(2.0 * x.T @ (prediction - y), "data") / count
        squares = jnp.sum(prediction * prediction) - 2.0 * jnp.sum(prediction * y) + jnp.sum(y * y)
        loss = jax.lax.psum(squares, "data") / count
        momentum = decay * momentum + grad
        return weights - learning_rate * momentum, momentum, loss, grad

    mapped = jax.shard_map(body, mesh=mesh, in_specs=(P("data", None), P("data"), P("data"), P(), P()), out_specs=P())
    return jax.jit(mapped) if compiled else mapped
