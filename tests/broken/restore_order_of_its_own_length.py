"""Mistake: restore checks that the order is a permutation of its own length (and the cursor against that length),
not of the contract's row count: the order of data one row shorter or longer passes."""

import json

import numpy as np

from shardlab.core.checkpoint import check_contract
from shardlab.core.state import replicate
from shardlab.errors import CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403

FIELDS = ("weights", "momentum", "key", "order", "cursor", "step")


def restore(path, expected_contract, mesh):
    try:
        with np.load(path, allow_pickle=False) as npz:
            text = npz["contract"]
            found = json.loads(str(text[()])) if text.shape == () else None
            state = {name: npz[name] for name in FIELDS}
            extra = sorted(set(npz.files) - {"contract", "integrity", *FIELDS})
    except Exception as exc:  # any read failure: a cut file, not an NPZ, a missing member, a contract not JSON
        raise CorruptCheckpointError(f"{path} is not a readable checkpoint: {exc}") from None
    if extra or not isinstance(found, dict):
        raise CorruptCheckpointError(f"{path}: unexpected members {extra} or a contract that is not a JSON dict")
    check_contract(found, expected_contract)
    width = expected_contract["features_shape"][1]
    order, cursor, step = state["order"], state["cursor"], state["step"]
    fine = (
        all(state[n].dtype == np.float32 and state[n].shape == (width,) for n in ("weights", "momentum"))
        and all(np.isfinite(state[n]).all() for n in ("weights", "momentum"))
        and state["key"].dtype == np.uint32
        and state["key"].shape == (2,)
        and order.dtype.kind in "iu"
        and order.ndim == 1
        and np.array_equal(np.sort(order), np.arange(len(order)))  # "a permutation" (of its own length)
        and all(a.dtype.kind in "iu" and a.shape == () for a in (cursor, step))
        and 0 <= int(cursor) <= len(order)
        and int(step) >= 0
    )
    if not fine:
        raise CorruptCheckpointError(f"{path}: a field is damaged")
    return {
        **state,
        "weights": replicate(state["weights"], mesh),
        "momentum": replicate(state["momentum"], mesh),
        "cursor": int(cursor),
        "step": int(step),
    }
