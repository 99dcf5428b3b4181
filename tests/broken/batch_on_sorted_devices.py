"""Mistake: next_batch places the batch on a mesh of the given mesh's devices sorted by id, not in the given
mesh's order: the same devices, but on a mesh of devices [3, 1] the first half of the rows lands on device 1."""

import numpy as np
from jax.sharding import Mesh

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import next_batch as reference_next_batch


def next_batch(state, data, batch_size, mesh):
    ordered = Mesh(np.array(sorted(mesh.devices.flat, key=lambda d: d.id)), mesh.axis_names)
    return reference_next_batch(state, data, batch_size, ordered)
