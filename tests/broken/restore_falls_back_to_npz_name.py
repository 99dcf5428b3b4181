"""Mistake: restore reads PATH + '.npz' when PATH does not exist (the name np.savez gives a file), so a missing
checkpoint is not refused: another file is restored in its place."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    if not os.path.lexists(path) and os.path.lexists(path + ".npz"):
        path = path + ".npz"
    return reference_restore(path, expected_contract, mesh)
