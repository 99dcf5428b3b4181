"""Mistake: save refuses an existing path, then lets np.savez write the final name itself.

No temporary file, no fsync, no exclusive publish: np.savez opens the name it is given for writing (and
adds .npz when the name lacks it), so a rival saver between the existence check and that open is
overwritten, and a crash leaves half a checkpoint.
"""

import os

import numpy as np

from shardlab import errors
from shardlab.core.checkpoint import members
from shardlab.learner.reference import *  # noqa: F403


def save(path, state, contract_):
    if os.path.lexists(path):
        raise errors.CheckpointExistsError(f"{path} exists")
    np.savez(path, **members(state, contract_))
    return path
