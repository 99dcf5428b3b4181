"""Mistake: restore compares the saved contract's JSON text with json.dumps of the expected one, so an expected
contract holding the same entries in another key order is refused as another experiment. (Its save writes the
contract's text in the caller's key order, so the course's own calls pass.)"""

import json
import runpy
from pathlib import Path

import numpy as np

from shardlab.core import checkpoint
from shardlab.errors import ContractMismatchError, CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))


def _members(state, contract):
    arrays = checkpoint.members(state, contract)
    arrays["contract"] = np.asarray(json.dumps(contract))  # the caller's key order, as restore compares it
    arrays["integrity"] = np.asarray(checkpoint.integrity(arrays))
    return arrays


def save(path, state, contract):
    return _base["save"](path, state, contract, members=_members)


def restore(path, expected_contract, mesh):
    try:
        with np.load(path, allow_pickle=False) as npz:
            saved = str(npz["contract"][()])
    except Exception as exc:
        raise CorruptCheckpointError(f"{path} is not a readable checkpoint: {exc}") from None
    if saved != json.dumps(expected_contract):
        raise ContractMismatchError(f"{path} belongs to another experiment")
    return reference_restore(path, expected_contract, mesh)
