"""Mistake: the denominator counts every slot, so padded slots pass for observations."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from shardlab.core.batch import ROWS, VALUES
from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.update import apply_momentum, local_sums
from shardlab.learner.reference import *  # noqa: F403


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    def body(features, targets, mask, weights, momentum):
        _, grad_num, loss_num = local_sums(features, targets, mask, weights)
        count = jnp.float32(features.shape[0])
        sums = (jax.lax.psum(s, "data") for s in (count, grad_num, loss_num))
        return apply_momentum(*sums, weights, momentum, learning_rate, decay)

    mapped = jax.shard_map(body, mesh=mesh, in_specs=(ROWS, VALUES, VALUES, P(), P()), out_specs=P())
    return jax.jit(mapped) if compiled else mapped
