"""Mistake: make_step keeps the learning rate and decay in one module-level dict that the step reads when it is
traced, so a step first run after a later make_step call uses the later call's values."""

import jax
from jax.sharding import PartitionSpec as P

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.devices import AXIS
from shardlab.learner.reference import *  # noqa: F403

LATEST = {}


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    LATEST.update(learning_rate=learning_rate, decay=decay)

    def body(features, targets, mask, weights, momentum):
        valid = mask > 0
        residual = jax.numpy.where(valid, features @ weights - targets, 0.0)
        count = jax.lax.psum(jax.numpy.sum(valid.astype(features.dtype)), AXIS)
        kept = jax.numpy.where(valid[:, None], features, 0.0)
        grad = jax.lax.psum(2.0 * (residual @ kept), AXIS) / count
        loss = jax.lax.psum(jax.numpy.sum(residual**2), AXIS) / count
        new_momentum = LATEST["decay"] * momentum + grad
        return weights - LATEST["learning_rate"] * new_momentum, new_momentum, loss, grad

    specs = (P(AXIS, None), P(AXIS), P(AXIS), P(), P())
    mapped = jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=(P(), P(), P(), P()))
    return jax.jit(mapped) if compiled else mapped
