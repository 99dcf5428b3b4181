"""Mistake: when the write fails, save removes the checkpoint's folder and its empty parents with os.removedirs,
whether it made them or found them: a save that raises leaves the folders that were there before."""

import os

import numpy as np

from shardlab.core import checkpoint
from shardlab.errors import CheckpointExistsError, CheckpointWriteError
from shardlab.learner.reference import *  # noqa: F403


def save(path, state, contract_):
    path = os.fspath(path)
    checkpoint.check_contract_form(contract_, f"refusing to save {path}")
    arrays = checkpoint.members(state, contract_)
    checkpoint._check_fields(arrays, contract_, f"refusing to save {path}")
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} already exists; use a new path")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    temporary = os.path.join(folder, f".tmp-{os.getpid()}-checkpoint.npz")
    try:
        with open(temporary, "xb") as handle:
            np.savez(handle, **arrays)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(temporary, path)
    except OSError as exc:
        os.unlink(temporary)
        try:
            os.removedirs(folder)  # the mistake: also the folders that were there, empty, before the save
        except OSError:
            pass
        raise CheckpointWriteError(f"writing {path} failed ({exc})") from None
    os.unlink(temporary)
    return path
