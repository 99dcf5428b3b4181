"""Mistake: each device takes its own mean, then the devices average those means."""

import jax
from jax.sharding import PartitionSpec as P

from shardlab.core.batch import ROWS, VALUES
from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.update import local_sums
from shardlab.learner.reference import *  # noqa: F403


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    def body(features, targets, mask, weights, momentum):
        count, grad_num, loss_num = local_sums(features, targets, mask, weights)
        grad, loss = jax.lax.pmean(grad_num / count, "data"), jax.lax.pmean(loss_num / count, "data")
        momentum = decay * momentum + grad
        return weights - learning_rate * momentum, momentum, loss, grad

    mapped = jax.shard_map(body, mesh=mesh, in_specs=(ROWS, VALUES, VALUES, P(), P()), out_specs=P())
    return jax.jit(mapped) if compiled else mapped
