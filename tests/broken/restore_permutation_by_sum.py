"""Mistake: restore tells a permutation by its range and its sum (0 <= id < rows, sum = rows(rows-1)/2): an order
with ids 0 and 2 both turned into 1 passes, though it is no permutation. Every other field is checked."""

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
            found = json.loads(str(text[()])) if text.dtype.kind == "U" and text.shape == () else None
            state = {name: npz[name] for name in FIELDS}
            extra = sorted(set(npz.files) - {"contract", "integrity", *FIELDS})
    except Exception as exc:  # any read failure: a cut file, not an NPZ, a missing member
        raise CorruptCheckpointError(f"{path} is not a readable checkpoint: {exc}") from None
    if extra:
        raise CorruptCheckpointError(f"{path} holds members no checkpoint has: {extra}")
    if not isinstance(found, dict):
        raise CorruptCheckpointError(f"{path}: the contract is not JSON text of a dict")
    check_contract(found, expected_contract)
    rows, width = expected_contract["features_shape"]
    order, cursor, step = state["order"], state["cursor"], state["step"]
    fine = (
        all(state[n].dtype == np.float32 and state[n].shape == (width,) for n in ("weights", "momentum"))
        and all(np.isfinite(state[n]).all() for n in ("weights", "momentum"))
        and state["key"].dtype == np.uint32
        and state["key"].shape == (2,)
        and order.dtype.kind in "iu"
        and order.shape == (rows,)
        and order.min() >= 0
        and order.max() < rows
        and int(order.sum()) == rows * (rows - 1) // 2  # "range and sum: a permutation"
        and all(a.dtype.kind in "iu" and a.shape == () for a in (cursor, step))
        and 0 <= int(cursor) <= rows
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
