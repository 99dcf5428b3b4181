"""Mistake: save removes whatever is at the path first, so an existing checkpoint is lost."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract_):
    if os.path.exists(path):
        os.remove(path)
    return reference_save(path, state, contract_)
