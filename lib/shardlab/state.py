"""The complete transition state and one transition: next batch, then the update."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from shardlab.batch import REPLICATED, next_batch
from shardlab.fixtures import check_dataset
from shardlab.sampler import initial_sampler

FIELDS = ("weights", "momentum", "key", "order", "cursor", "step")


def replicate(values, mesh: Mesh) -> jax.Array:
    """A float32 copy of `values` on every device of `mesh` (NamedSharding(mesh, P()))."""
    return jax.device_put(jnp.asarray(values, jnp.float32), NamedSharding(mesh, REPLICATED))


def initial(seed: int, data, mesh: Mesh) -> dict:
    """State at step 0: zero weights and momentum, a split key and the first order."""
    data = check_dataset(data)
    zeros = np.zeros(data.features.shape[1], np.float32)
    return {
        "weights": replicate(zeros, mesh),
        "momentum": replicate(zeros, mesh),
        **initial_sampler(seed, data.features.shape[0]),
        "step": 0,
    }


def transition(state: dict, data, batch_size: int, step, mesh: Mesh) -> tuple[dict, float, np.ndarray]:
    """Return (new state, pre-update loss, ids): one batch, one optimiser update, step + 1.

    An empty batch cannot reach the update: `pad` raises EmptyBatchError first.
    """
    state, batch = next_batch(state, data, batch_size, mesh)
    weights, momentum, loss, _ = step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])
    new_state = {**state, "weights": weights, "momentum": momentum, "step": int(state["step"]) + 1}
    return new_state, float(loss), batch.ids


def host_copy(state: dict) -> dict:
    """NumPy copy of every field (for comparisons and fingerprints)."""
    return {
        "weights": np.asarray(state["weights"], np.float32),
        "momentum": np.asarray(state["momentum"], np.float32),
        "key": np.asarray(state["key"], np.uint32),
        "order": np.asarray(state["order"]),
        "cursor": int(state["cursor"]),
        "step": int(state["step"]),
    }
