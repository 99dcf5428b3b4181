"""The dataset lives on the devices: each step moves only the selected IDs.

`place_dataset` puts the rows on the mesh once, split over `data` (each device holds a
contiguous block). A step then receives the batch as a small int32 vector of IDs, padded
with -1 to a fixed length (the -1s are the mask: a slot is valid iff its ID is >= 0),
copied to every device. Inside the compiled step each device gathers the selected rows
it holds and feeds them, with "valid and held here" as the mask, to the stage 2
`local_sums`; the reduction and the momentum update are unchanged. No row crosses
between devices or from the host after placement.

The sums are grouped by the device that holds a row rather than by batch slot, so
losses and weights agree with the stage 2 step to float32 rounding, not bit for bit.
"""

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from shardlab.core.batch import REPLICATED, ROWS, VALUES, padded_length
from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.devices import AXIS
from shardlab.core.fixtures import check_dataset
from shardlab.core.sampler import advance
from shardlab.core.update import apply_momentum, local_sums
from shardlab.errors import EmptyBatchError
from shardlab.perf.packed import packed_psum

EMPTY = -1  # ID of a padded slot


class Resident(NamedTuple):
    """The dataset on the mesh: row-sharded `features` and `targets`, `rows` real rows."""

    features: jax.Array
    targets: jax.Array
    rows: int


class ResidentBatch(NamedTuple):
    """One step's batch when the rows stay on the devices: the resident arrays and the placed slot IDs.

    There is no mask array: a slot is valid iff its ID is not EMPTY (the step derives the mask).
    """

    features: jax.Array
    targets: jax.Array
    slots: jax.Array
    ids: np.ndarray


def place_dataset(data, mesh: Mesh) -> Resident:
    """Place every row once, zero-padded to a multiple of the device count (padding is never selected)."""
    data = check_dataset(data)
    rows, width = data.features.shape
    total = padded_length(rows, mesh.size)
    features = np.zeros((total, width), np.float32)
    targets = np.zeros(total, np.float32)
    features[:rows], targets[:rows] = data.features, data.targets
    return Resident(
        jax.device_put(features, NamedSharding(mesh, ROWS)),
        jax.device_put(targets, NamedSharding(mesh, VALUES)),
        rows,
    )


def slot_ids(ids: np.ndarray, slots: int) -> np.ndarray:
    """`ids` as int32, followed by EMPTY up to `slots` entries."""
    if len(ids) == 0:
        raise EmptyBatchError("the batch selects no rows; a global mean needs at least one")
    out = np.full(slots, EMPTY, np.int32)
    out[: len(ids)] = ids
    return out


def prepare(state: dict, resident: Resident, batch_size: int, mesh: Mesh) -> tuple[dict, jax.Array, np.ndarray]:
    """Return (new state, placed slot IDs, ids): advance the sampler and copy only the IDs to the devices."""
    state, ids = advance(state, batch_size)
    placed = jax.device_put(slot_ids(ids, min(batch_size, resident.rows)), NamedSharding(mesh, REPLICATED))
    return state, placed, ids


def next_batch(state: dict, resident: Resident, batch_size: int, mesh: Mesh) -> tuple[dict, ResidentBatch]:
    """Return (new state, ResidentBatch): `prepare`, with the resident arrays alongside (nothing is copied)."""
    state, placed, ids = prepare(state, resident, batch_size, mesh)
    return state, ResidentBatch(resident.features, resident.targets, placed, ids)


def _held_rows(features, targets, ids):
    """Rows of `ids` that this device holds, and the mask "valid and held here"."""
    block = features.shape[0]
    local = ids - jax.lax.axis_index(AXIS) * block
    held = (ids != EMPTY) & (local >= 0) & (local < block)
    index = jnp.where(held, local, 0)
    return features[index], targets[index], held.astype(features.dtype)


def _resident_body(features, targets, ids, weights, momentum, *, learning_rate, decay, packed):
    sums = local_sums(*_held_rows(features, targets, ids), weights)
    sums = packed_psum(*sums) if packed else tuple(jax.lax.psum(s, AXIS) for s in sums)
    return apply_momentum(*sums, weights, momentum, learning_rate, decay)


def make_resident_step(mesh: Mesh, learning_rate: float = LEARNING_RATE, decay: float = DECAY, packed: bool = False):
    """Return compiled step(features, targets, ids, weights, momentum) -> (weights, momentum, loss, grad).

    `features` and `targets` are a Resident's arrays; `ids` come from `prepare`.
    `packed=True` reduces with one all_reduce (see shardlab.perf.packed), else three.
    """
    body = partial(_resident_body, learning_rate=float(learning_rate), decay=float(decay), packed=packed)
    mapped = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(ROWS, VALUES, REPLICATED, REPLICATED, REPLICATED),
        out_specs=(REPLICATED, REPLICATED, REPLICATED, REPLICATED),
    )
    return jax.jit(mapped)
