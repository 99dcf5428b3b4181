"""Mistake: after publishing, save makes the new name durable by opening os.path.dirname(path) and fsyncing it;
for a bare file name that is '', so save raises FileNotFoundError with the checkpoint already in place."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract):
    saved = reference_save(path, state, contract)
    folder = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return saved
