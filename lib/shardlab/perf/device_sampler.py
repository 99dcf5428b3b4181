"""The sampler on the devices: key, order and cursor advanced inside a compiled program.

The rules are the host sampler's (`shardlab.core.sampler`), written with `jax.numpy` so
they trace: when the epoch is used up, `key, sub = jax.random.split(key)` and
`order = jax.random.permutation(sub, n)` on the legacy uint32 key, cursor back to 0; then
the next `min(batch_size, n - cursor)` IDs of `order`. A batch never crosses an epoch
boundary and one larger than the dataset yields the whole reshuffled dataset. The batch
has a fixed number of slots (a full batch padded to the device count); a slot past the
batch's length is padding: its ID is `EMPTY` and its mask 0, by position.

`to_device` places the schema's host fields in the device form.
"""

from collections.abc import Sequence
from functools import partial
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


def _keys_and_orders(sampler: DeviceSampler, epochs: int):
    """Keys and orders of the current epoch and the next `epochs`, drawn with the idiom, one split per epoch."""

    def split(key, _):
        key, sub = jax.random.split(key)
        return key, (key, sub)

    _, (keys, subs) = jax.lax.scan(split, sampler.key, None, length=epochs)
    rows = sampler.order.shape[0]
    orders = jax.vmap(lambda sub: jax.random.permutation(sub, rows).astype(sampler.order.dtype))(subs)
    return jnp.concatenate([sampler.key[None], keys]), jnp.concatenate([sampler.order[None], orders])


def _current_only(sampler: DeviceSampler, epochs: int):
    """The current key and order in every one of the `1 + epochs` places (when no step leaves this epoch)."""
    return (
        jnp.broadcast_to(sampler.key, (1 + epochs, *sampler.key.shape)),
        jnp.broadcast_to(sampler.order, (1 + epochs, *sampler.order.shape)),
    )


def plan(sampler: DeviceSampler, batch_size: int, slots: int, k: int, active) -> tuple[DeviceSampler, Slots]:
    """Return (sampler after `active` steps, K rows of slots): K steps of the host sampler's `advance` at once.

    Batch t's place follows from arithmetic: the `r` batches left in the current epoch
    come first, then every epoch holds `per_epoch` batches. Only the epochs that K steps
    can reach are drawn (all at once, by `vmap` over the split keys), and only in a
    dispatch whose K rows reach past the current epoch (`lax.cond`): a dispatch inside
    one epoch draws no permutation (when K steps span at most one epoch boundary, a run
    then draws one per epoch, as the host sampler does, not one per dispatch).
    The sampler after `active <= K` steps is the epoch and cursor of step `active - 1`.
    Rows past `active` are computed but belong to no step.
    """
    rows = sampler.order.shape[0]
    per_epoch = -(-rows // batch_size)
    left = jnp.where(sampler.cursor < rows, -(-(rows - sampler.cursor) // batch_size), 0)
    epochs = 1 + (k - 1) // per_epoch
    keys, orders = jax.lax.cond(
        k > left, partial(_keys_and_orders, epochs=epochs), partial(_current_only, epochs=epochs), sampler
    )
    t = jnp.arange(k, dtype=sampler.cursor.dtype)
    later = t - left
    epoch = jnp.where(t < left, 0, 1 + later // per_epoch)
    start = jnp.where(t < left, sampler.cursor + t * batch_size, (later % per_epoch) * batch_size)
    length = jnp.minimum(batch_size, rows - start)
    position = jnp.arange(slots, dtype=start.dtype)
    valid = position[None, :] < length[:, None]
    index = jnp.minimum(start[:, None] + position[None, :], rows - 1)
    ids = jnp.where(valid, orders[epoch[:, None], index], EMPTY)
    last = jnp.asarray(active, t.dtype) - 1
    after = DeviceSampler(
        keys[epoch[last]], orders[epoch[last]], (start[last] + length[last]).astype(sampler.cursor.dtype)
    )
    return after, Slots(ids, valid.astype(jnp.float32))


def host_fields(state: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(key, order, cursor) of `state` as the host arrays the device form is made of (cursor as int32)."""
    return (
        np.asarray(state["key"], DTYPES["key"]),
        np.asarray(state["order"], DTYPES["order"]),
        np.asarray(int(state["cursor"]), np.int32),
    )


def to_device(state: dict, put) -> DeviceSampler:
    """The host sampler fields of `state` as a DeviceSampler, placed by one `put(tuple of host arrays)`."""
    return DeviceSampler(*put(host_fields(state)))


class StepIds(Sequence):
    """The IDs of each step, held as one flat array and offsets; a step's array is a view made on access."""

    def __init__(self, flat: np.ndarray, offsets: np.ndarray):
        self.flat, self.offsets = flat, offsets

    @classmethod
    def of(cls, ids) -> "StepIds":
        """From a (steps, slots) array of slot IDs: one mask, no per-step Python (padding is always last)."""
        ids = np.asarray(ids)
        valid = ids != EMPTY
        offsets = np.concatenate([[0], np.cumsum(valid.sum(axis=1))])
        return cls(ids[valid].astype(DTYPES["order"]), offsets)

    @classmethod
    def join(cls, parts) -> "StepIds":
        """One StepIds of several, in order."""
        parts = list(parts)
        if not parts:
            return cls(np.zeros(0, DTYPES["order"]), np.zeros(1, np.int64))
        starts = np.cumsum([0] + [len(p.flat) for p in parts[:-1]])
        offsets = np.concatenate([parts[0].offsets[:1]] + [p.offsets[1:] + s for p, s in zip(parts, starts)])
        return cls(np.concatenate([p.flat for p in parts]), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"step {index} of {len(self)}")
        return self.flat[self.offsets[index] : self.offsets[index + 1]]

    def __eq__(self, other):
        return (
            isinstance(other, Sequence)
            and len(self) == len(other)
            and all(np.array_equal(a, b) for a, b in zip(self, other))
        )
