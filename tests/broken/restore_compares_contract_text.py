"""Mistake: restore compares the saved contract's JSON text with json.dumps of the expected one, so an expected
contract holding the same entries in another key order is refused as another experiment. (Its save writes the
contract's text in the caller's key order, so the course's own calls pass.)"""

import json
import os
import tempfile

import numpy as np

from shardlab.core import checkpoint
from shardlab.errors import CheckpointExistsError, ContractMismatchError, CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def save(path, state, contract):
    arrays = checkpoint.members(state, contract)
    arrays["contract"] = np.asarray(json.dumps(contract))
    arrays["integrity"] = np.asarray(checkpoint.integrity(arrays))
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} exists")
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".part")
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **arrays)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)
    except FileExistsError:
        raise CheckpointExistsError(f"{path} exists") from None
    finally:
        os.unlink(tmp)
    return path


def restore(path, expected_contract, mesh):
    try:
        with np.load(path, allow_pickle=False) as npz:
            saved = str(npz["contract"][()])
    except Exception as exc:
        raise CorruptCheckpointError(f"{path} is not a readable checkpoint: {exc}") from None
    if saved != json.dumps(expected_contract):
        raise ContractMismatchError(f"{path} belongs to another experiment")
    return reference_restore(path, expected_contract, mesh)
