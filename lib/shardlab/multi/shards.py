"""Placement from addressable shards only, and the transition every controller runs.

Each controller holds the same host values (the sampler is identical everywhere) but puts
on its devices only the slices its own devices hold: `jax.make_array_from_callback`
asks for exactly those indices. The update itself is stage 2's `make_step` on the global mesh.
"""

import hashlib

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from shardlab.batch import REPLICATED, ROWS, VALUES, Batch, pad
from shardlab.fingerprint import batch_hash
from shardlab.fixtures import check_dataset
from shardlab.sampler import advance, initial_sampler


def from_host(values, mesh: Mesh, spec) -> jax.Array:
    """A global array whose addressable shards this process fills from its host copy."""
    values = np.asarray(values)
    return jax.make_array_from_callback(values.shape, NamedSharding(mesh, spec), lambda index: values[index])


def initial(seed: int, data, mesh: Mesh) -> dict:
    """Step-0 state (as `sl.initial`), with weights and momentum placed shard by shard."""
    data = check_dataset(data)
    zeros = np.zeros(data.features.shape[1], np.float32)
    return {
        "weights": from_host(zeros, mesh, REPLICATED),
        "momentum": from_host(zeros, mesh, REPLICATED),
        **initial_sampler(seed, data.features.shape[0]),
        "step": 0,
    }


def next_batch(state: dict, data, batch_size: int, mesh: Mesh) -> tuple[dict, Batch]:
    """Advance the host sampler, pad, and place only this process's rows."""
    state, ids = advance(state, batch_size)
    features, targets, mask = pad(data, ids, mesh.size)
    placed = (from_host(features, mesh, ROWS), from_host(targets, mesh, VALUES), from_host(mask, mesh, VALUES))
    return state, Batch(*placed, ids)


def sampler_digest(state: dict) -> str:
    """sha256 of key, order and cursor (16 hex digits): equal on every controller or an error."""
    digest = hashlib.sha256(np.asarray(state["key"], np.uint32).tobytes())
    digest.update(np.asarray(state["order"], np.int32).tobytes())
    digest.update(str(int(state["cursor"])).encode())
    return digest.hexdigest()[:16]


def agreement(state: dict, data, ids) -> str:
    """What controllers compare before a step: the batch hash and the sampler digest."""
    return f"{batch_hash(data, ids)}|{sampler_digest(state)}"


def apply(state: dict, batch: Batch, step) -> tuple[dict, float]:
    """Run the global update on a placed batch; return (new state, pre-update loss)."""
    weights, momentum, loss, _ = step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])
    jax.block_until_ready((weights, momentum, loss))
    return {**state, "weights": weights, "momentum": momentum, "step": int(state["step"]) + 1}, float(loss)
