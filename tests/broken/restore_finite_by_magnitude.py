"""Mistake: restore's "finite" test bounds the magnitude, so a valid checkpoint with large momentum is refused."""

import numpy as np

from shardlab.errors import CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    state = reference_restore(path, expected_contract, mesh)
    for name in ("weights", "momentum"):
        if not np.all(np.abs(np.asarray(state[name])) < 1e6):
            raise CorruptCheckpointError(f"{name} is not finite")
    return state
