"""The sampler on the devices: key, order and cursor advanced inside a compiled program.

The rules are the host sampler's (`shardlab.core.sampler`), written with `jax.numpy` so
they trace: when the epoch is used up, `key, sub = jax.random.split(key)` and
`order = jax.random.permutation(sub, n)` on the legacy uint32 key, cursor back to 0; then
the next `min(batch_size, n - cursor)` IDs of `order`. A batch never crosses an epoch
boundary and one larger than the dataset yields the whole reshuffled dataset. The batch
has a fixed number of slots (a full batch padded to the device count); a slot past the
batch's length is padding: its ID is `EMPTY` and its mask 0, by position.

`to_device`/`to_host` convert between the schema's host fields and the device form.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from shardlab.core.batch import padded_length
from shardlab.core.config import check_batch_size
from shardlab.core.schema import DTYPES

EMPTY = -1  # ID of a padded slot


class DeviceSampler(NamedTuple):
    """The sampler fields as device arrays: key uint32 (2,), order int32 (n,), cursor int32 ()."""

    key: jax.Array
    order: jax.Array
    cursor: jax.Array


class Slots(NamedTuple):
    """One batch as fixed-length slots: `ids` (EMPTY where padded) and `mask` (1 valid, 0 padded)."""

    ids: jax.Array
    mask: jax.Array


def slot_count(batch_size: int, rows: int, num_devices: int) -> int:
    """Slots of every batch: a full batch (at most the dataset) padded to a multiple of the device count."""
    return padded_length(min(check_batch_size(batch_size), rows), num_devices)


def _reshuffle(key, order):
    key, sub = jax.random.split(key)
    return key, jax.random.permutation(sub, order.shape[0]).astype(order.dtype)


def advance(sampler: DeviceSampler, batch_size: int, slots: int) -> tuple[DeviceSampler, Slots]:
    """Return (new sampler, slots): the device twin of `core.sampler.advance`, traceable under jit."""
    rows = sampler.order.shape[0]
    key, order = jax.lax.cond(sampler.cursor >= rows, _reshuffle, lambda k, o: (k, o), sampler.key, sampler.order)
    cursor = jnp.where(sampler.cursor >= rows, 0, sampler.cursor).astype(sampler.cursor.dtype)
    length = jnp.minimum(batch_size, rows - cursor)
    position = jnp.arange(slots, dtype=cursor.dtype)
    valid = position < length
    ids = jnp.where(valid, order[jnp.minimum(cursor + position, rows - 1)], EMPTY)
    return DeviceSampler(key, order, cursor + length), Slots(ids, valid.astype(jnp.float32))


def to_device(state: dict, put) -> DeviceSampler:
    """The host sampler fields of `state` as a DeviceSampler, each placed with `put(host_array)`."""
    return DeviceSampler(
        put(np.asarray(state["key"], DTYPES["key"])),
        put(np.asarray(state["order"], DTYPES["order"])),
        put(np.asarray(int(state["cursor"]), np.int32)),
    )


def to_host(sampler: DeviceSampler) -> dict:
    """The schema's host form of the sampler fields: key uint32, order int32, cursor int."""
    key, order, cursor = jax.device_get(tuple(sampler))
    return {
        "key": np.asarray(key, DTYPES["key"]),
        "order": np.asarray(order, DTYPES["order"]),
        "cursor": int(cursor),
    }


def trim(ids) -> np.ndarray:
    """The batch's IDs from one row of slot IDs: the valid ones, in order (padding is always last)."""
    ids = np.asarray(ids)
    return ids[ids != EMPTY].astype(DTYPES["order"])
