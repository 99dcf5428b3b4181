"""Mistake: restore opens the checkpoint 'r+b' to hold a lock while reading it, so a valid checkpoint on a
read-only file system is refused."""

import fcntl

from shardlab.errors import CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    try:
        handle = open(path, "r+b")
    except OSError as exc:
        raise CorruptCheckpointError(f"{path} is unreadable: {exc}") from None
    with handle:
        fcntl.lockf(handle, fcntl.LOCK_EX)
        return reference_restore(path, expected_contract, mesh)
