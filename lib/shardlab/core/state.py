"""The one pipeline: the step-0 state and one transition (next batch, then the update).

How arrays reach the devices is the single thing a caller may change (`put`): one
process puts whole arrays, each controller of a multi-process job only its own shards.
"""

import numpy as np
from jax.sharding import Mesh

from shardlab.core.batch import REPLICATED, next_batch, put_whole
from shardlab.core.fixtures import check_dataset
from shardlab.core.sampler import initial_sampler
from shardlab.core.schema import FIELDS, host_copy

__all__ = ["FIELDS", "host_copy", "initial", "replicate", "transition", "updated"]


def replicate(values, mesh: Mesh, put=put_whole):
    """A float32 copy of `values` on every device of `mesh` (NamedSharding(mesh, P()))."""
    return put(np.asarray(values, np.float32), mesh, REPLICATED)


def initial(seed: int, data, mesh: Mesh, put=put_whole) -> dict:
    """State at step 0: zero weights and momentum, a split key and the first order."""
    data = check_dataset(data)
    zeros = np.zeros(data.features.shape[1], np.float32)
    return {
        "weights": replicate(zeros, mesh, put),
        "momentum": replicate(zeros, mesh, put),
        **initial_sampler(seed, data.features.shape[0]),
        "step": 0,
    }


def updated(state: dict, weights, momentum, steps: int = 1) -> dict:
    """A new state after `steps` optimiser updates: new weights and momentum, step + steps, sampler as given."""
    return {**state, "weights": weights, "momentum": momentum, "step": int(state["step"]) + int(steps)}


def transition(state: dict, data, batch_size: int, step, mesh: Mesh, put=put_whole) -> tuple[dict, float, np.ndarray]:
    """Return (new state, pre-update loss, ids): one batch, one optimiser update, step + 1.

    An empty batch cannot reach the update: `pad` raises EmptyBatchError first.
    """
    state, batch = next_batch(state, data, batch_size, mesh, put)
    weights, momentum, loss, _ = step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])
    return updated(state, weights, momentum), float(loss), batch.ids
