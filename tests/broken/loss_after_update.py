"""Mistake: the loss is taken at the updated weights instead of the weights the gradient used."""

import jax
from jax.sharding import PartitionSpec as P

from shardlab.core.batch import ROWS, VALUES
from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.update import apply_momentum, local_sums
from shardlab.learner.reference import *  # noqa: F403


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    def body(features, targets, mask, weights, momentum):
        sums = (jax.lax.psum(s, "data") for s in local_sums(features, targets, mask, weights))
        weights, momentum, _, grad = apply_momentum(*sums, weights, momentum, learning_rate, decay)
        count, _, loss_num = (jax.lax.psum(s, "data") for s in local_sums(features, targets, mask, weights))
        return weights, momentum, loss_num / count, grad

    mapped = jax.shard_map(body, mesh=mesh, in_specs=(ROWS, VALUES, VALUES, P(), P()), out_specs=P())
    return jax.jit(mapped) if compiled else mapped
