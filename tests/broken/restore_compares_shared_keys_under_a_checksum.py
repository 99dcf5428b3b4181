"""Mistake: restore compares only the contract members both contracts have, so a saved contract with a member less
or a member more passes; its integrity checksum still refuses a contract edited in the file."""

import json

from shardlab.core import archive, checkpoint
from shardlab.core.schema import host_copy
from shardlab.core.state import replicate
from shardlab.errors import ContractMismatchError, CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403


def restore(path, expected_contract, mesh):
    def compare(saved):
        try:
            found = json.loads(str(saved[()]))
        except (ValueError, TypeError, IndexError):
            raise CorruptCheckpointError(f"{path}: the contract is not valid JSON") from None
        shared = set(found) & set(expected_contract) if isinstance(found, dict) else set()  # the mistake
        if not isinstance(found, dict) or any(found[k] != expected_contract[k] for k in shared):
            raise ContractMismatchError(f"{path} belongs to another experiment")

    arrays = archive.read_members(path, expected_contract, compare)
    checkpoint._check_fields(arrays, expected_contract, path)
    if str(arrays["integrity"][()]) != checkpoint.integrity(arrays):
        raise CorruptCheckpointError(f"{path}: the arrays do not match the integrity checksum saved with them")
    checkpoint.check_sampler(arrays, expected_contract, path)
    state = host_copy(arrays)
    return {**state, "weights": replicate(state["weights"], mesh), "momentum": replicate(state["momentum"], mesh)}
