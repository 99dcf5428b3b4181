"""Mistake: each device folds momentum into its local gradient share, and the sum is taken afterwards."""

import jax
from jax.sharding import PartitionSpec as P

from shardlab.core.batch import ROWS, VALUES
from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.update import local_sums
from shardlab.learner.reference import *  # noqa: F403


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    def body(features, targets, mask, weights, momentum):
        count, grad_num, loss_num = local_sums(features, targets, mask, weights)
        count = jax.lax.psum(count, "data")
        share = grad_num / count
        momentum = jax.lax.psum(decay * momentum + share, "data")  # momentum added on every device, then summed
        loss = jax.lax.psum(loss_num, "data") / count
        return weights - learning_rate * momentum, momentum, loss, jax.lax.psum(share, "data")

    mapped = jax.shard_map(body, mesh=mesh, in_specs=(ROWS, VALUES, VALUES, P(), P()), out_specs=P())
    return jax.jit(mapped) if compiled else mapped
