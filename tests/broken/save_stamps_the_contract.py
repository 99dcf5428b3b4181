"""Mistake: save records the step it was taken at in the caller's contract dict, so the file's contract is no longer
the one the run computes: the caller's dict changes, and restore in another process refuses the checkpoint."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract_):
    contract_["saved_at_step"] = int(state["step"])  # "where this checkpoint was taken"
    return reference_save(path, state, contract_)
