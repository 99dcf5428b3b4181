"""Mistake: restore refuses any file over 4 MiB as a zip bomb ("a checkpoint is a few kB"), so its own save's
checkpoint of a wide or long experiment is refused."""

import os

from shardlab.errors import CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    if os.path.isfile(path) and os.path.getsize(path) > 4 << 20:
        raise CorruptCheckpointError(f"{path}: too large to be a checkpoint")
    return reference_restore(path, expected_contract, mesh)
