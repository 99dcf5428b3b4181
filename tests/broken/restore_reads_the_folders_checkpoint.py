"""Mistake: restore given a folder reads the checkpoint.npz inside it (a run folder's layout), so a folder at the
path is not refused: another file is restored in its place."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "checkpoint.npz")):
        path = os.path.join(path, "checkpoint.npz")
    return reference_restore(path, expected_contract, mesh)
