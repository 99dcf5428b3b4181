"""Mistake: the numerators are added over devices, but each device divides by its own count."""

import jax
from jax.sharding import PartitionSpec as P

from shardlab.core.batch import ROWS, VALUES
from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.update import apply_momentum, local_sums
from shardlab.learner.reference import *  # noqa: F403


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    def body(features, targets, mask, weights, momentum):
        count, grad_num, loss_num = local_sums(features, targets, mask, weights)
        grad_num, loss_num = jax.lax.psum(grad_num, "data"), jax.lax.psum(loss_num, "data")
        return apply_momentum(count, grad_num, loss_num, weights, momentum, learning_rate, decay)

    # check_vma=False silences JAX's warning that the outputs now differ per device
    specs = {"in_specs": (ROWS, VALUES, VALUES, P(), P()), "out_specs": P(), "check_vma": False}
    mapped = jax.shard_map(body, mesh=mesh, **specs)
    return jax.jit(mapped) if compiled else mapped
