"""Mistake: next_batch pads to a multiple of jax.device_count() (the four logical devices) instead of the size of
the mesh it is given. On some batches the slot count it gives equals another padding rule's (the batch size
rounded up to the mesh's device count), so both fit the numbers."""

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardlab.core.batch import Batch, pad
from shardlab.core.sampler import advance
from shardlab.learner.reference import *  # noqa: F403


def next_batch(state, data, batch_size, mesh):
    state, ids = advance(state, batch_size)
    features, targets, mask = pad(data, ids, jax.device_count())
    rows, flat = NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P("data"))
    return state, Batch(jax.device_put(features, rows), jax.device_put(targets, flat), jax.device_put(mask, flat), ids)
