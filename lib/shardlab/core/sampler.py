"""The host sampler: key, order and cursor, advanced as pure functions."""

import jax
import numpy as np

from shardlab.core.config import check_batch_size
from shardlab.core.errors import DataError


def _draw(key: np.ndarray, num_examples: int) -> tuple[np.ndarray, np.ndarray]:
    """Split `key`; keep the first half, draw a permutation with the second."""
    key, subkey = jax.random.split(key)
    order = jax.random.permutation(subkey, num_examples)
    return np.asarray(key, dtype=np.uint32), np.asarray(order, dtype=np.int32)


def initial_sampler(seed: int, num_examples: int) -> dict:
    """Sampler fields for epoch 0: the split key, the first order, cursor 0."""
    if num_examples < 1:
        raise DataError(f"cannot sample from {num_examples} examples")
    key, order = _draw(jax.random.PRNGKey(seed), num_examples)
    return {"key": key, "order": order, "cursor": 0}


def advance(state: dict, batch_size: int) -> tuple[dict, np.ndarray]:
    """Return (new state, ids): the next ids of this epoch, reshuffling first if it is used up.

    A batch never crosses an epoch boundary, so the last batch keeps the remainder.
    Only `key`, `order` and `cursor` change; the caller's dict and arrays are untouched.
    """
    check_batch_size(batch_size)
    key, order, cursor = state["key"], state["order"], int(state["cursor"])
    if cursor >= len(order):
        key, order = _draw(key, len(order))
        cursor = 0
    ids = np.array(order[cursor : cursor + batch_size], dtype=np.int32)
    return {**state, "key": key, "order": order, "cursor": cursor + len(ids)}, ids


def epoch_batches(num_examples: int, batch_size: int) -> list[int]:
    """Batch lengths of one epoch, from arithmetic alone (23 rows in 7s -> [7, 7, 7, 2])."""
    check_batch_size(batch_size)
    full, rest = divmod(num_examples, batch_size)
    return [batch_size] * full + ([rest] if rest else [])
