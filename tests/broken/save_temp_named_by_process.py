"""Mistake: the temporary file is named after the process ("<pid>.partial"), so every save in one process writes the
same temporary name: two savers in one process (two threads) share one file, and a new name is not drawn per save."""

import os

import numpy as np

from shardlab.core.checkpoint import check_contract_form, members
from shardlab.errors import CheckpointExistsError
from shardlab.learner.reference import *  # noqa: F403


def save(path, state, contract):
    path = os.fspath(path)
    check_contract_form(contract, f"refusing to save {path}")
    arrays = members(state, contract)
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} already exists")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.getpid()}.partial")
    try:
        with open(tmp, "wb") as handle:
            np.savez(handle, **arrays)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise CheckpointExistsError(f"{path} appeared while saving") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return path
