"""Sampler diagnoses read from a walk: what arithmetic and the recipe say each next_batch call gives,
and the first place where an implementation's ids or sampler fields leave them, in the learner's terms.
"""

import numpy as np

from shardlab.checker.formulas import mark
from shardlab.verify.oracle import epoch_batches


def fits(state: dict, wanted: dict | None) -> bool:
    return wanted is not None and all(
        name in state and np.array_equal(np.asarray(state[name]).astype(np.int64), np.asarray(wanted[name]))
        for name in ("cursor", "key", "order")
    )


def follows(state: dict, want: dict) -> bool:
    """Whether the sampler fields of `state` are one call's of the walk, in either form an epoch's end may take (a
    lazy sampler's cursor == rows, or an eager one's new epoch already drawn)."""
    return fits(state, want["after"]) or fits(state, want["eager"])


def length_cause(rows: int, batch_size: int, observed: list[np.ndarray], walk: list[dict]) -> str | None:
    """Why batch lengths differ from arithmetic, read from the ids: dropped or topped-up remainder, or other."""
    for call, (ids, want) in enumerate(zip(observed, walk)):
        if len(ids) == len(want["ids"]):
            continue
        if len(ids) > batch_size:
            return (
                f"call {call + 1} returned {len(ids)} ids for batch size {batch_size} -> take at most batch_size ids"
                + mark("remainder", cause="batch-too-long")
            )
        if len(ids) > len(want["ids"]):
            following = walk[call + 1]["ids"] if call + 1 < len(walk) else np.array([], np.int64)
            remainder = len(want["ids"])
            extra = len(ids) - remainder
            if np.array_equal(ids[:remainder], want["ids"]) and np.array_equal(ids[remainder:], following[:extra]):
                return (
                    f"call {call + 1}: the {remainder}-id remainder was topped up with {len(ids) - remainder} ids from "
                    "the next epoch, so the batch crosses the epoch boundary -> the last batch of an epoch keeps "
                    f"just the remainder ({rows} rows in {batch_size}s give {epoch_batches(rows, batch_size)})"
                    + mark("remainder", cause="remainder-topped-up")
                )
            if np.array_equal(ids, following[: len(ids)]):
                return (
                    f"call {call + 1}: the {remainder}-id remainder was dropped and a new epoch started -> the last "
                    f"batch of an epoch keeps the remainder ({rows} rows in {batch_size}s give "
                    f"{epoch_batches(rows, batch_size)}); dropping it silently changes the objective and the meaning "
                    "of an epoch" + mark("remainder", cause="remainder-dropped")
                )
        return (
            f"call {call + 1} returned {len(ids)} ids where arithmetic says {len(want['ids'])} -> take the ids left "
            "in this epoch (at most batch_size), then reshuffle" + mark("remainder", "cursor", cause="batch-length")
        )
    return None


def state_cause(states: list[dict], observed: list[np.ndarray], walk: list[dict], batch_size: int) -> str | None:
    """Why the sampler fields or ids leave the recipe, read from the first call where they do."""
    for call, want in enumerate(walk):
        before, after = states[call], states[call + 1]
        if follows(after, want):
            if not np.array_equal(observed[call], want["ids"]):
                return (
                    f"call {call + 1}: the sampler fields are right but the ids are not -> the batch is "
                    "order[cursor : cursor + batch_size] of the state's order"
                    + mark("cursor", cause="ids-not-from-order")
                )
            continue
        lazy = want["after"]
        same = {name: np.array_equal(np.asarray(after[name]), np.asarray(before[name])) for name in ("key", "order")}
        key_right = np.array_equal(np.asarray(after["key"]), lazy["key"]) or (
            want["eager"] is not None and np.array_equal(np.asarray(after["key"]), want["eager"]["key"])
        )
        drew_new = want["new_epoch"] and np.array_equal(observed[call], want["ids"])
        if want["new_epoch"] and key_right and same["order"] and drew_new:
            return (
                f"call {call + 1} starts epoch {want['epoch']}: its ids come from the new permutation, but the "
                "returned state still holds the previous order, so the new order was not kept -> return the new "
                "order (with the split key and the reset cursor) in the state"
                + mark("reshuffle", cause="new-order-not-kept")
            )
        if want["new_epoch"] and same["key"]:
            return (
                f"call {call + 1} starts epoch {want['epoch']} but the saved key did not change: one key reused for "
                "every epoch -> at each new epoch split the saved key again (key, subkey = jax.random.split(key)), "
                "keep `key` and draw with `subkey`" + mark("reshuffle", cause="key-reused")
            )
        if not key_right:
            return (
                f"call {call + 1}: the saved key {np.asarray(after['key']).tolist()} is not the first half of "
                f"split(saved key) ({lazy['key'].tolist()}) -> keep the first half, draw with the second"
                + mark("reshuffle", cause="key-not-first-half")
            )
        if not np.array_equal(np.asarray(after["order"]), lazy["order"]):
            return (
                f"call {call + 1}: the key is right but the order is not the recipe's -> draw "
                "jax.random.permutation(subkey, n) with the second half of the split"
                + mark("reshuffle", cause="order-not-the-recipes")
            )
        cursor, previous = int(after["cursor"]), int(before["cursor"])
        if cursor == previous % len(lazy["order"]) + batch_size and len(observed[call]) < batch_size:
            return (
                f"call {call + 1} took {len(observed[call])} ids but the cursor moved from {previous} to {cursor}, "
                f"i.e. by batch_size ({batch_size}) -> advance the cursor by the number of ids taken; the cursor "
                f"is the position of the next unread id, at most {len(lazy['order'])}"
                + mark("cursor", cause="cursor-by-batch-size")
            )
        return (
            f"call {call + 1}: cursor {cursor}, where coverage arithmetic gives {lazy['cursor']} -> the cursor is the "
            "position of the next unread id in order" + mark("cursor", cause="cursor-not-coverage")
        )
    return None
