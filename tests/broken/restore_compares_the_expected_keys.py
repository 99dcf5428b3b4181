"""Mistake: restore compares only the members of the expected contract, so a saved contract with a member more (or
an expected one with a member less) passes; its integrity checksum still refuses a contract edited in the file."""

import json

from shardlab.core import archive, checkpoint
from shardlab.core.schema import host_copy
from shardlab.core.state import replicate
from shardlab.errors import ContractMismatchError, CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403


def _differs(found, expected) -> bool:
    return any(found.get(k) != v for k, v in expected.items())  # the mistake


def restore(path, expected_contract, mesh):
    def compare(saved):
        try:
            found = json.loads(str(saved[()]))
        except (ValueError, TypeError, IndexError):
            raise CorruptCheckpointError(f"{path}: the contract is not valid JSON") from None
        if not isinstance(found, dict) or _differs(found, expected_contract):
            raise ContractMismatchError(f"{path} belongs to another experiment")

    arrays = archive.read_members(path, expected_contract, compare)
    checkpoint._check_fields(arrays, expected_contract, path)
    if str(arrays["integrity"][()]) != checkpoint.integrity(arrays):
        raise CorruptCheckpointError(f"{path}: the arrays do not match the integrity checksum saved with them")
    checkpoint.check_sampler(arrays, expected_contract, path)
    state = host_copy(arrays)
    return {**state, "weights": replicate(state["weights"], mesh), "momentum": replicate(state["momentum"], mesh)}
