"""Mistake: save normalises the caller's counters in place, state["cursor"] = int(state["cursor"]) (and step), "so
json and np.savez see plain ints": the caller's dict is changed, unseen while its counters already are Python ints."""

from shardlab.core.checkpoint import save as reference_save
from shardlab.learner.reference import *  # noqa: F403


def save(path, state, contract_):
    state["cursor"], state["step"] = int(state["cursor"]), int(state["step"])
    return reference_save(path, state, contract_)
