"""Mistake: save returns os.path.abspath of the path it was given ("a path that works from anywhere"), not that
path: a caller that compares or records the path it asked for finds another string."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract):
    return os.path.abspath(reference_save(path, state, contract))
