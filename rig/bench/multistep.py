"""K optimiser updates per dispatch: K prepared batches, one compiled `lax.scan`.

Every batch is padded to the same number of slots (that of a full batch), stacked along
a leading axis of length K and placed with that axis unsplit; the scan applies the
stage 2 mapped step to each in turn, carrying weights and momentum. The host sampler
advances exactly as K single transitions would, epoch reshuffles included.
"""

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shardlab.core.batch import pad, padded_length
from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.devices import AXIS
from shardlab.core.sampler import advance
from shardlab.core.update import make_step
from shardlab.errors import ConfigError
from shardlab.perf.packed import make_packed_step

STACKED_ROWS = P(None, AXIS, None)  # (K, slots, features)
STACKED_VALUES = P(None, AXIS)  # (K, slots)


def _fit(array: np.ndarray, slots: int) -> np.ndarray:
    """`array` zero-padded along its first axis to `slots` entries."""
    return np.pad(array, [(0, slots - len(array))] + [(0, 0)] * (array.ndim - 1))


def prepare_many(state: dict, data, batch_size: int, k: int, mesh: Mesh):
    """Return (new state, placed (features, targets, mask) stacked K deep, list of K id arrays)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"steps per dispatch must be a positive integer, got {k!r}")
    slots = padded_length(min(batch_size, data.features.shape[0]), mesh.size)
    batches, ids = [], []
    for _ in range(k):
        state, batch_ids = advance(state, batch_size)
        batches.append([_fit(a, slots) for a in pad(data, batch_ids, mesh.size)])
        ids.append(batch_ids)
    features, targets, mask = (np.stack(parts) for parts in zip(*batches))
    placed = (
        jax.device_put(features, NamedSharding(mesh, STACKED_ROWS)),
        jax.device_put(targets, NamedSharding(mesh, STACKED_VALUES)),
        jax.device_put(mask, NamedSharding(mesh, STACKED_VALUES)),
    )
    return state, placed, ids


def make_multistep(mesh: Mesh, learning_rate: float = LEARNING_RATE, decay: float = DECAY, packed: bool = False):
    """Return compiled run(features, targets, mask, weights, momentum) -> (weights, momentum, losses).

    Inputs are stacked K deep (from `prepare_many`); `losses[i]` is the pre-update loss of
    update i. The per-update body is `make_step(..., compiled=False)` (or the packed one).
    """
    make = make_packed_step if packed else make_step
    mapped = make(mesh, learning_rate, decay, compiled=False)

    def one(carry, batch):
        weights, momentum, loss, _ = mapped(*batch, *carry)
        return (weights, momentum), loss

    def run(features, targets, mask, weights, momentum):
        (weights, momentum), losses = jax.lax.scan(one, (weights, momentum), (features, targets, mask))
        return weights, momentum, losses

    return jax.jit(run)
