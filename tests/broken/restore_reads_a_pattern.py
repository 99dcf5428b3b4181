"""Mistake: restore reads the path as a glob pattern and takes its last match, so a path that does not exist is not
refused when its name, as a pattern, matches a checkpoint beside it."""

import glob
import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    matches = sorted(glob.glob(os.fspath(path)))  # the mistake: '*', '?' and '[' are letters of a name
    return reference_restore(matches[-1] if matches else path, expected_contract, mesh)
