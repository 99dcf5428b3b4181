"""Mistake: save always writes to `<path>.partial`, opened exclusively: a killed save's leftover refuses later saves."""

import os

import numpy as np

from shardlab.core.checkpoint import members
from shardlab.errors import CheckpointExistsError
from shardlab.learner.reference import *  # noqa: F403


def save(path, state, contract_):
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} exists")
    tmp = f"{path}.partial"
    with open(tmp, "xb") as handle:  # one saver at a time
        np.savez(handle, **members(state, contract_))
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise CheckpointExistsError(f"{path} exists") from None
    finally:
        os.unlink(tmp)
    return path
