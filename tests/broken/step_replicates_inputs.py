"""Mistake: the step's in_specs replicate every input, so each device computes the whole batch (the numbers are
right, an all-reduce is there, but nothing is data parallel)."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.learner.reference import *  # noqa: F403


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    def body(features, targets, mask, weights, momentum):
        valid = mask > 0
        residual = jnp.where(valid, features @ weights - targets, 0.0)
        count = jnp.sum(valid.astype(jnp.float32))
        grad = jax.lax.pmean(2.0 * jnp.where(valid[:, None], features, 0.0).T @ residual / count, "data")
        loss = jax.lax.pmean(jnp.sum(residual * residual) / count, "data")
        momentum = decay * momentum + grad
        return weights - learning_rate * momentum, momentum, loss, grad

    mapped = jax.shard_map(body, mesh=mesh, in_specs=(P(), P(), P(), P(), P()), out_specs=P())
    return jax.jit(mapped) if compiled else mapped
