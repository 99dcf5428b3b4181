"""Mistake: next_batch fills one host buffer per shape for the padded rows and places it with jax.device_put (no
allocation per batch); where device_put shares that buffer's memory, an earlier batch changes when the next is built.
XLA's CPU client shares a host buffer only where its address is 64-byte aligned (a slice's too), so the buffers are
made aligned: the sharing, and the mistake, are then the same in every process, whatever address malloc gives."""

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardlab.core.batch import Batch
from shardlab.learner import reference
from shardlab.learner.reference import *  # noqa: F403

_BUFFERS = {}


def _aligned(shape) -> np.ndarray:
    """An empty float32 array of `shape` whose data starts at a multiple of 64 bytes."""
    count = int(np.prod(shape))
    raw = np.empty(count + 16, np.float32)
    start = (-raw.ctypes.data % 64) // 4
    return raw[start : start + count].reshape(shape)


def next_batch(state, data, batch_size, mesh):
    state, batch = reference.next_batch(state, data, batch_size, mesh)
    placed = []
    for name, spec in (("features", P("data", None)), ("targets", P("data")), ("mask", P("data"))):
        values = np.asarray(getattr(batch, name))
        buffer = _BUFFERS.setdefault((name, values.shape), _aligned(values.shape))
        buffer[...] = values  # the same buffer, filled again for every batch of this shape
        placed.append(jax.device_put(buffer, NamedSharding(mesh, spec)))
    return state, Batch(*placed, batch.ids)
