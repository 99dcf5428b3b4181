"""Mistake: the temporary file is the target's name plus '.tmp', opened with truncation: two savers of one
checkpoint write, publish and remove the same temporary file."""

import os

import numpy as np

from shardlab.core.checkpoint import members
from shardlab.errors import CheckpointExistsError
from shardlab.learner.reference import *  # noqa: F403


def save(path, state, contract_):
    path = os.fspath(path)
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} exists")
    tmp = path + ".tmp"
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            np.savez(handle, **members(state, contract_))
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise CheckpointExistsError(f"{path} exists") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
