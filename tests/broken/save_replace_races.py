"""Mistake: save checks that the path is free, writes a temporary file, then os.replace()s it into place.

The check and the rename are two steps: another saver that publishes in between is silently replaced.
"""

import os
import tempfile

import numpy as np

from shardlab.core.checkpoint import members
from shardlab.errors import CheckpointExistsError
from shardlab.learner.reference import *  # noqa: F403


def save(path, state, contract_):
    if os.path.exists(path):
        raise CheckpointExistsError(f"{path} exists")
    arrays = members(state, contract_)  # the reference's members, so the reference restore reads them
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".npz")
    with os.fdopen(fd, "wb") as handle:
        np.savez(handle, **arrays)
    os.replace(tmp, path)
    return path
