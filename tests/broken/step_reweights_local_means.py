"""Mistake: each device takes its own mean and multiplies it back by its own count before the sum over the devices:
x / c * c rounds in float32 where a device's count c is no power of two, so the step is not exact where nothing
rounds (integer data, a global count that is a power of two)."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from shardlab.core.batch import ROWS, VALUES
from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.update import local_sums
from shardlab.learner.reference import *  # noqa: F403


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    def body(features, targets, mask, weights, momentum):
        count, grad_num, loss_num = local_sums(features, targets, mask, weights)
        own = jnp.maximum(count, 1.0)
        grad_num, loss_num = grad_num / own * count, loss_num / own * count  # the mistake
        count, grad_num, loss_num = (jax.lax.psum(x, "data") for x in (count, grad_num, loss_num))
        grad, loss = grad_num / count, loss_num / count
        momentum = decay * momentum + grad
        return weights - learning_rate * momentum, momentum, loss, grad

    mapped = jax.shard_map(body, mesh=mesh, in_specs=(ROWS, VALUES, VALUES, P(), P()), out_specs=P())
    return jax.jit(mapped) if compiled else mapped
