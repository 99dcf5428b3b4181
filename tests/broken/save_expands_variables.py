"""Mistake: save expands environment variables in the path (os.path.expandvars, "so '$SCRATCH/run1' works"): a file
name holding '$HOME' is written under the home folder's path instead of at the name given."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract_):
    return reference_save(os.path.expandvars(os.fspath(path)), state, contract_)
