"""The host sampler: key, order and cursor, advanced as pure functions."""

import jax
import numpy as np

from shardlab.core.config import check_batch_size
from shardlab.core.errors import DataError


def draw(key: np.ndarray, num_examples: int) -> tuple[np.ndarray, np.ndarray]:
    """Split `key`; keep the first half, draw a permutation with the second."""
    key, subkey = jax.random.split(key)
    order = jax.random.permutation(subkey, num_examples)
    return np.asarray(key, dtype=np.uint32), np.asarray(order, dtype=np.int32)


def initial_sampler(seed: int, num_examples: int) -> dict:
    """Sampler fields for epoch 0: the split key, the first order, cursor 0."""
    if num_examples < 1:
        raise DataError(f"cannot sample from {num_examples} examples")
    key, order = draw(jax.random.PRNGKey(seed), num_examples)
    return {"key": key, "order": order, "cursor": 0}


def advance(state: dict, batch_size: int, reshuffle=draw) -> tuple[dict, np.ndarray]:
    """Return (new state, ids): the next ids of this epoch, reshuffling first if it is used up.

    A batch never crosses an epoch boundary, so the last batch keeps the remainder.
    Only `key`, `order` and `cursor` change; the caller's dict and arrays are untouched.
    `reshuffle(key, n) -> (key, order)` draws the next epoch (`draw` by default); another one
    continues the same run only if it returns the same values.
    """
    check_batch_size(batch_size)
    key, order, cursor = state["key"], state["order"], int(state["cursor"])
    if cursor >= len(order):
        key, order = reshuffle(key, len(order))
        cursor = 0
    ids = np.array(order[cursor : cursor + batch_size], dtype=np.int32)
    return {**state, "key": key, "order": order, "cursor": cursor + len(ids)}, ids


def epoch_batches(num_examples: int, batch_size: int) -> list[int]:
    """Batch lengths of one epoch, from arithmetic alone (23 rows in 7s -> [7, 7, 7, 2])."""
    check_batch_size(batch_size)
    full, rest = divmod(num_examples, batch_size)
    return [batch_size] * full + ([rest] if rest else [])


MAX_EPOCHS = 1_000_000  # sampler_at replays at most this many key splits (a course run makes a few hundred)


@jax.jit
def _split_chain(key, count):
    """`key` after `count` splits, each keeping the first half (the saved key of every epoch)."""
    return jax.lax.fori_loop(0, count, lambda _, k: jax.random.split(k)[0], key)


def sampler_at(seed: int, num_examples: int, batch_size: int, step: int) -> dict:
    """Key, order and cursor after `step` transitions from `initial_sampler`: a pure function, no batch is read.

    Arithmetic gives the number of permutations drawn and the cursor; the split chain gives the key.
    """
    per_epoch = len(epoch_batches(num_examples, batch_size))
    draws = 1 if step == 0 else (step - 1) // per_epoch + 1  # the reshuffle happens when the next batch is read
    cursor = 0 if step == 0 else min(((step - 1) % per_epoch + 1) * batch_size, num_examples)
    if draws > MAX_EPOCHS:
        raise DataError(f"step {step} lies {draws} epochs into the run; sampler_at replays at most {MAX_EPOCHS}")
    key = _split_chain(np.asarray(jax.random.PRNGKey(seed), np.uint32), np.int32(draws - 1))
    key, order = draw(key, num_examples)
    return {"key": key, "order": order, "cursor": cursor}
