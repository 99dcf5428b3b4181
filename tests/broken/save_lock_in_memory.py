"""Mistake: save guards its existence check and os.replace with a lock held in this process's memory.

Another saver in the same process waits its turn; a saver in another process does not see the lock.
"""

import os
import tempfile
import threading

import numpy as np

from shardlab.core.checkpoint import members
from shardlab.errors import CheckpointExistsError
from shardlab.learner.reference import *  # noqa: F403

_LOCK = threading.Lock()


def save(path, state, contract_):
    with _LOCK:
        if os.path.lexists(path):
            raise CheckpointExistsError(f"{path} exists")
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".npz")
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **members(state, contract_))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    return path
