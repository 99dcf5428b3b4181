"""Mistake: save refuses a path that exists, but with a bare FileExistsError, not the course's error."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as _save


def save(path, state, contract_):
    if os.path.lexists(path):
        raise FileExistsError(path)
    return _save(path, state, contract_)
