"""Mistake: save turns every backslash of the path into '/', so a name holding one (a letter of a name on POSIX) is
written into a folder of another name."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract_):
    return reference_save(os.fspath(path).replace("\\", "/"), state, contract_)
