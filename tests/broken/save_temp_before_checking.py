"""Mistake: save creates its temporary file before it reads the state, so a save refused for a bad state
(a field missing, a field no array holds) leaves the temporary behind."""

import os
import tempfile

import numpy as np

from shardlab.core.checkpoint import members
from shardlab.learner.reference import *  # noqa: F403


def save(path, state, contract_):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    arrays = members(state, contract_)  # raises for a bad state: the temporary stays
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **arrays)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)
    finally:
        os.unlink(tmp)
    return path
