"""Mistake: save refuses a taken name, then leaves the writing and publishing to a background thread and returns
the path at once; the caller reads a path that holds nothing yet. The writer batches its work: it writes a save
when the next save comes in (or a minute later), so no clock decides whether the path is empty when save returns."""

import os
import threading

from shardlab.errors import CheckpointExistsError
from shardlab.learner import reference
from shardlab.learner.reference import *  # noqa: F403

_HELD = []  # the event that releases the save the writer holds back


def _later(release, path, state, contract_):
    release.wait(60.0)
    reference.save(path, state, contract_)


def save(path, state, contract_):
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} exists")
    for release in _HELD:
        release.set()
    _HELD[:] = [threading.Event()]
    threading.Thread(target=_later, args=(_HELD[0], path, state, contract_), daemon=True).start()
    return path
