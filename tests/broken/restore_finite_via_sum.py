"""Mistake: restore tests the sum of a field for finiteness; a valid checkpoint of large momentum overflows it."""

import numpy as np

from shardlab.errors import CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    state = reference_restore(path, expected_contract, mesh)
    for name in ("weights", "momentum"):
        if not np.isfinite(np.sum(np.asarray(state[name], dtype=np.float32))):
            raise CorruptCheckpointError(f"{name} is not finite")
    return state
