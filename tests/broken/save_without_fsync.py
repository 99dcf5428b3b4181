"""Mistake: save writes a temporary file and links it to the final name, but never fsyncs it: after a power loss
the published name can hold a file whose bytes never reached the disk."""

import os
import tempfile

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
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **arrays)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise CheckpointExistsError(f"{path} appeared while saving") from None
    finally:
        os.unlink(tmp)
    return path
