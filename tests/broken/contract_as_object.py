"""Mistake: save stores the contract dict itself, which NumPy can only keep as a pickled object array."""

import numpy as np

from shardlab.learner.reference import *  # noqa: F403

FIELDS = ("weights", "momentum", "key", "order", "cursor", "step")


def save(path, state, contract_):
    with open(path, "xb") as handle:
        np.savez(handle, contract=np.array(contract_, dtype=object), **{n: np.asarray(state[n]) for n in FIELDS})
    return path
