"""Correct alternative: the sampler slices with np.take, pads with np.pad and places with make_array_from_callback.

The order is kept as int64 (restore gives it back as int64 too), the mask is built from positions (np.arange <
rows), and transition uses this next_batch (the reference's transition would use the reference's sampler).
"""

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardlab.core.batch import Batch
from shardlab.core.devices import AXIS
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def _draw(key):
    key, subkey = jax.random.split(key)
    return np.asarray(key, np.uint32), subkey


def initial(seed, data, mesh):
    features = np.asarray(data[0])
    key, subkey = _draw(jax.random.PRNGKey(seed))
    zeros = np.zeros(features.shape[1], np.float32)
    replicated = NamedSharding(mesh, P())
    return {
        "weights": jax.device_put(zeros, replicated),
        "momentum": jax.device_put(zeros, replicated),
        "key": key,
        "order": np.asarray(jax.random.permutation(subkey, features.shape[0]), np.int64),
        "cursor": 0,
        "step": 0,
    }


def _place(values, mesh, spec):
    return jax.make_array_from_callback(values.shape, NamedSharding(mesh, spec), lambda index: values[index])


def next_batch(state, data, batch_size, mesh):
    features, targets = np.asarray(data[0], np.float32), np.asarray(data[1], np.float32)
    key, order, cursor = np.asarray(state["key"], np.uint32), np.asarray(state["order"], np.int64), int(state["cursor"])
    if cursor >= len(order):  # the epoch is used up: split the saved key again and draw the next order
        key, subkey = _draw(key)
        order, cursor = np.asarray(jax.random.permutation(subkey, len(order)), np.int64), 0
    ids = np.take(order, np.arange(cursor, min(cursor + batch_size, len(order))))
    slots = -(-len(ids) // mesh.size) * mesh.size
    extra = slots - len(ids)
    rows = np.pad(np.take(features, ids, axis=0), ((0, extra), (0, 0)))
    values = np.pad(np.take(targets, ids), (0, extra))
    mask = (np.arange(slots) < len(ids)).astype(np.float32)
    batch = Batch(_place(rows, mesh, P(AXIS, None)), _place(values, mesh, P(AXIS)), _place(mask, mesh, P(AXIS)), ids)
    return {**state, "key": key, "order": order, "cursor": cursor + len(ids)}, batch


def transition(state, data, batch_size, step, mesh):
    state, batch = next_batch(state, data, batch_size, mesh)
    weights, momentum, loss, _ = step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])
    return {**state, "weights": weights, "momentum": momentum, "step": int(state["step"]) + 1}, float(loss), batch.ids


def restore(path, expected_contract, mesh):
    state = reference_restore(path, expected_contract, mesh)
    return {**state, "order": np.asarray(state["order"], np.int64)}
