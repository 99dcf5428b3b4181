"""Mistake: save publishes a temporary file with os.link but never removes the temporary name."""

import os
import tempfile

import numpy as np

from shardlab.core.checkpoint import members
from shardlab.learner.reference import *  # noqa: F403


def save(path, state, contract_):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".npz")
    with os.fdopen(fd, "wb") as handle:
        np.savez(handle, **members(state, contract_))
    os.link(tmp, path)  # the temporary name stays behind
    return path
