"""Correct alternative: publish with os.replace after an existence check, both under an exclusive lock.

A bare check-then-replace leaves a gap another saver can use; an flock on `<path>.lock` closes it (a
saver that finds the lock taken refuses). The kernel drops the lock when its process ends, so a save
killed midway leaves at most an unlocked lock file, which never refuses a later save.
"""

import fcntl
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
    path = os.path.join(os.getcwd(), os.fspath(path))  # absolute; a '..' is left for the OS to resolve
    lock = os.open(path + ".lock", os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CheckpointExistsError(f"{path} is being saved by another saver; use a new path") from None
        try:
            if os.path.lexists(path):
                raise CheckpointExistsError(f"{path} already exists; use a new path")
            members = {"contract": np.asarray(json.dumps(contract_)), **to_arrays(state)}  # may raise: no file yet
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".npz")
            try:
                with os.fdopen(fd, "wb") as handle:
                    np.savez(handle, **members)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, path)
            except BaseException:
                if os.path.lexists(tmp):
                    os.unlink(tmp)
                raise
        finally:
            os.unlink(path + ".lock")  # by the holder only, after publishing: a later saver finds the path
    finally:
        os.close(lock)
    return path


def restore(path, expected_contract, mesh):
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        found = json.loads(str(arrays.pop("contract")))
    except Exception as exc:
        raise CorruptCheckpointError(f"{path} is not a readable checkpoint: {exc}") from None
    if not isinstance(found, dict):
        raise CorruptCheckpointError(f"{path}: the saved contract is a {type(found).__name__}, not a dict")
    check_contract(found, expected_contract)
    missing = {"weights", "momentum", "key", "order", "cursor", "step"} - set(arrays)
    if missing:
        raise CorruptCheckpointError(f"{path} lacks {sorted(missing)}")
    check(arrays, expected_contract["num_features"], expected_contract["features_shape"][0], path)
    state = {**arrays, "cursor": int(arrays["cursor"]), "step": int(arrays["step"])}
    return {**state, "weights": replicate(arrays["weights"], mesh), "momentum": replicate(arrays["momentum"], mesh)}
