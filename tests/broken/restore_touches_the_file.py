"""Mistake: restore marks the checkpoint as recently used (os.utime) for a retention policy: the file's bytes stay,
but restore changed it on disk, where the course's restore only reads."""

import os

from shardlab.core.checkpoint import restore as reference_restore
from shardlab.learner.reference import *  # noqa: F403


def restore(path, expected_contract, mesh):
    state = reference_restore(path, expected_contract, mesh)
    os.utime(path)  # "recently used"
    return state
