"""Mistake: save writes its temporary file, links it to the final name, and only then fsyncs it: a crash between
the link and the fsync can leave a published checkpoint whose bytes never reached the disk."""

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
            handle.flush()
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise CheckpointExistsError(f"{path} appeared while saving") from None
            os.fsync(handle.fileno())
    finally:
        os.unlink(tmp)
    return path
