"""Mistake: temporary names come from random.Random(0), so every process draws the same sequence of names and
two savers in two processes write the same temporary file."""

import os
import random

import numpy as np

from shardlab.core.checkpoint import members
from shardlab.errors import CheckpointExistsError
from shardlab.learner.reference import *  # noqa: F403

_NAMES = random.Random(0)


def save(path, state, contract_):
    path = os.fspath(path)
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} exists")
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), f".tmp-{_NAMES.randrange(10**9)}.npz")
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
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
