"""Mistake: save makes its temporary file before it refuses a path that exists; the refusal removes the temporary's
name but leaves its descriptor open, one per refused save."""

import os

from shardlab.core import files
from shardlab.errors import CheckpointExistsError
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract_):
    path = os.fspath(path)
    if os.path.lexists(path):
        _, tmp = files.temporary(os.path.dirname(os.path.abspath(path)), ".npz")  # the mistake: made, then refused
        os.unlink(tmp)
        raise CheckpointExistsError(f"{path} already exists; use a new path")
    return reference_save(path, state, contract_)
