"""Mistake: make_step leaves out the psums on a one-device mesh ("nothing to add across devices"): the numbers are
right there, but the compiled step holds no collective on that mesh, unlike on every other."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.learner.reference import *  # noqa: F403


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    def total(value):
        return value if mesh.size == 1 else jax.lax.psum(value, "data")

    def body(x, y, mask, w, v):
        valid = mask > 0
        r = jnp.where(valid, x @ w - y, 0.0)
        count = total(jnp.sum(valid.astype(jnp.float32)))
        grad = total(2.0 * (r @ jnp.where(valid[:, None], x, 0.0))) / count
        v = decay * v + grad
        return w - learning_rate * v, v, total(jnp.sum(r * r)) / count, grad

    specs = (P("data", None), P("data"), P("data"), P(), P())
    mapped = jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=P(), check_vma=mesh.size > 1)
    return jax.jit(mapped) if compiled else mapped
