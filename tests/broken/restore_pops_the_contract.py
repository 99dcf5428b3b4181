"""Mistake: restore takes the schema version out of the caller's expected contract (pop) to compare it apart.

The first restore still works; every later one, given the same dict, compares with a contract that lacks the
version and refuses as another experiment, whatever the file holds.
"""

from shardlab.learner import reference
from shardlab.learner.reference import *  # noqa: F403


def restore(path, expected_contract, mesh):
    version = expected_contract.pop("schema_version", None)
    return reference.restore(path, {**expected_contract, "schema_version": version}, mesh)
