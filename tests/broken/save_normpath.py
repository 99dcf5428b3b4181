"""Mistake: save tidies the path with os.path.normpath: 'a/../ck' becomes 'ck', but when a is a symbolic link to
another folder the OS resolves 'a/..' to that folder's parent, so the checkpoint lands beside the link instead."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract_):
    return reference_save(os.path.normpath(os.fspath(path)), state, contract_)
