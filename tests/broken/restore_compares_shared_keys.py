"""Mistake: restore compares only the contract entries both contracts have (and keeps no integrity hash), so a
saved contract with one entry less or one entry more passes."""

import json

from shardlab.core import archive, checkpoint
from shardlab.core.schema import host_copy
from shardlab.core.state import replicate
from shardlab.errors import ContractMismatchError, CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403


def restore(path, expected_contract, mesh):
    arrays = archive.read_members(path, expected_contract)
    try:
        found = json.loads(str(arrays["contract"][()]))
    except (ValueError, TypeError, IndexError):
        raise CorruptCheckpointError(f"{path}: the contract is not valid JSON") from None
    shared = set(found) & set(expected_contract) if isinstance(found, dict) else set()
    if not isinstance(found, dict) or any(found[k] != expected_contract[k] for k in shared):
        raise ContractMismatchError(f"{path} belongs to another experiment")
    checkpoint._check_fields(arrays, expected_contract, path)
    checkpoint.check_sampler(arrays, expected_contract, path)
    state = host_copy(arrays)
    return {**state, "weights": replicate(state["weights"], mesh), "momentum": replicate(state["momentum"], mesh)}
