"""Mistake: save expands a leading '~' of the path (os.path.expanduser), so a relative path through a folder
named '~' is written into the home folder instead of at the path given."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract_):
    return reference_save(os.path.expanduser(os.fspath(path)), state, contract_)
