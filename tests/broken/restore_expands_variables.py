"""Mistake: restore expands environment variables in the path (os.path.expandvars, "so '$SCRATCH/run1' works"): the
checkpoint its own save wrote under a name holding '$HOME' is looked for under the home folder's path instead."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    return reference_restore(os.path.expandvars(os.fspath(path)), expected_contract, mesh)
