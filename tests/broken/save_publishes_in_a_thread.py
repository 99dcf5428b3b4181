"""Mistake: save refuses a taken name, then leaves the writing and publishing to a background thread and returns
the path at once; the caller reads a path that holds nothing yet."""

import os
import threading
import time

from shardlab.errors import CheckpointExistsError
from shardlab.learner import reference
from shardlab.learner.reference import *  # noqa: F403


def _later(path, state, contract_):
    time.sleep(0.5)  # the writer batches its work
    reference.save(path, state, contract_)


def save(path, state, contract_):
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} exists")
    threading.Thread(target=_later, args=(path, state, contract_), daemon=True).start()
    return path
