"""Mistake: save strips a trailing separator from the path, so 'runs/ck/' (a folder, where no checkpoint file can be)
writes the file 'runs/ck' instead of failing."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract_):
    return reference_save(os.fspath(path).rstrip(os.sep) or os.sep, state, contract_)
