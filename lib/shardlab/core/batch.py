"""Padding a batch to the device count and placing it on the mesh."""

from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shardlab.core.devices import AXIS
from shardlab.core.errors import EmptyBatchError
from shardlab.core.sampler import advance, draw

ROWS = P(AXIS, None)  # features: rows split over devices
VALUES = P(AXIS)  # targets and mask
REPLICATED = P()  # weights and momentum


class Batch(NamedTuple):
    """A placed, padded batch plus the host ids it was built from."""

    features: jax.Array
    targets: jax.Array
    mask: jax.Array
    ids: np.ndarray


def padded_length(rows: int, num_devices: int) -> int:
    """Smallest multiple of `num_devices` that holds `rows` rows."""
    return -(-rows // num_devices) * num_devices


def pad(data, ids: np.ndarray, num_devices: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host arrays (features, targets, mask) for `ids`, zero-padded to a device multiple; `data` any pair."""
    data_features, data_targets = data
    rows = len(ids)
    if rows == 0:
        raise EmptyBatchError("the batch selects no rows; a global mean needs at least one")
    slots = padded_length(rows, num_devices)
    features = np.zeros((slots, np.shape(data_features)[1]), np.float32)
    targets = np.zeros(slots, np.float32)
    mask = np.zeros(slots, np.float32)
    features[:rows] = np.asarray(data_features)[ids]
    targets[:rows] = np.asarray(data_targets)[ids]
    mask[:rows] = 1.0
    return features, targets, mask


def device_counts(mask, num_devices: int) -> list[int]:
    """Valid rows held by each device: the mask split into `num_devices` equal blocks."""
    blocks = np.asarray(mask).reshape(num_devices, -1)
    return [int(c) for c in blocks.sum(axis=1)]


def put_whole(values, mesh: Mesh, spec) -> jax.Array:
    """Placement in one process: the whole host array, split over `mesh` as `spec` says."""
    return jax.device_put(values, NamedSharding(mesh, spec))


def put_shards(values, mesh: Mesh, spec) -> jax.Array:
    """Placement by any controller: only the slices of `values` this process's devices hold.

    `jax.make_array_from_callback` asks for exactly the addressable indices, so every
    process of a multi-controller job calls it with the same host values. In one process
    it is equivalent to `put_whole`.
    """
    values = np.asarray(values)
    return jax.make_array_from_callback(values.shape, NamedSharding(mesh, spec), lambda index: values[index])


def place(features, targets, mask, mesh: Mesh, put=put_whole) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Put rows on P('data', None) and targets and mask on P('data')."""
    return put(features, mesh, ROWS), put(targets, mesh, VALUES), put(mask, mesh, VALUES)


def next_batch(state: dict, data, batch_size: int, mesh: Mesh, put=put_whole, reshuffle=draw) -> tuple[dict, Batch]:
    """Return (new state, placed batch): advance the sampler, pad, place. Step is unchanged."""
    state, ids = advance(state, batch_size, reshuffle)
    features, targets, mask = pad(data, ids, mesh.size)
    return state, Batch(*place(features, targets, mask, mesh, put), ids)


def is_replicated(array, mesh) -> bool:
    """True if `array` is laid out as NamedSharding(mesh, P()) with a copy on every device of `mesh`."""
    sharding = getattr(array, "sharding", None)
    return bool(
        sharding is not None
        and sharding.is_equivalent_to(NamedSharding(mesh, REPLICATED), np.ndim(array))
        and len(array.addressable_shards) == mesh.size
    )
