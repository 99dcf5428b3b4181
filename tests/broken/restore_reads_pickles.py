"""Mistake: restore reads with allow_pickle=True and ignores the members it does not know."""

import numpy as np

from shardlab.core.state import replicate
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    try:
        with np.load(path, allow_pickle=True) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except Exception:
        arrays = {}
    if all(a.dtype != object for a in arrays.values()):
        return reference_restore(path, expected_contract, mesh)
    state = {"key": arrays["key"], "order": arrays["order"]}
    state.update(cursor=int(arrays["cursor"]), step=int(arrays["step"]))
    return {**state, "weights": replicate(arrays["weights"], mesh), "momentum": replicate(arrays["momentum"], mesh)}
