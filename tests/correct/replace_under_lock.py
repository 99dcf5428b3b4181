"""Correct alternative: publish with os.replace after an existence check, both inside an exclusive lock file.

A bare check-then-replace leaves a gap another saver can use; the O_EXCL lock closes it (a saver
that finds the lock taken refuses, and a crash leaves a stale lock that refuses too: never an overwrite).
"""

import json
import os
import tempfile

import numpy as np

from shardlab.core.checkpoint import check_contract
from shardlab.core.schema import check, to_arrays
from shardlab.core.state import replicate
from shardlab.errors import CheckpointExistsError, CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403


def save(path, state, contract_):
    path = os.path.abspath(path)
    try:
        lock = os.open(path + ".lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        message = f"{path} is being saved by another saver (or a stale .lock); use a new path"
        raise CheckpointExistsError(message) from None
    try:
        if os.path.lexists(path):
            raise CheckpointExistsError(f"{path} already exists; use a new path")
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".npz")
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, contract=np.asarray(json.dumps(contract_)), **to_arrays(state))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        os.close(lock)
        os.unlink(path + ".lock")
    return path


def restore(path, expected_contract, mesh):
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        found = json.loads(str(arrays.pop("contract")))
    except Exception as exc:
        raise CorruptCheckpointError(f"{path} is not a readable checkpoint: {exc}") from None
    check_contract(found, expected_contract)
    missing = {"weights", "momentum", "key", "order", "cursor", "step"} - set(arrays)
    if missing:
        raise CorruptCheckpointError(f"{path} lacks {sorted(missing)}")
    check(arrays, expected_contract["num_features"], expected_contract["features_shape"][0], path)
    state = {**arrays, "cursor": int(arrays["cursor"]), "step": int(arrays["step"])}
    return {**state, "weights": replicate(arrays["weights"], mesh), "momentum": replicate(arrays["momentum"], mesh)}
