"""Mistake: restore refuses a checkpoint that os.access says it may not write, though restore only reads: a file on
a read-only file system (or, for every user but root, a mode-0444 file) is refused."""

import os

from shardlab.errors import CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    if os.path.isfile(path) and not os.access(path, os.R_OK | os.W_OK):  # the mistake: W_OK
        raise CorruptCheckpointError(f"{path} cannot be read")
    return reference_restore(path, expected_contract, mesh)
