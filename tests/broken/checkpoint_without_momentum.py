"""Mistake: the checkpoint leaves momentum out, and restore rebuilds it as zeros."""

import json

import numpy as np

from shardlab.core.checkpoint import check_contract
from shardlab.core.state import replicate
from shardlab.learner.reference import *  # noqa: F403

KEPT = ("weights", "key", "order", "cursor", "step")


def save(path, state, contract_):
    with open(path, "xb") as handle:
        np.savez(handle, contract=json.dumps(contract_), **{name: np.asarray(state[name]) for name in KEPT})
    return path


def restore(path, expected_contract, mesh):
    with np.load(path, allow_pickle=False) as npz:
        check_contract(json.loads(str(npz["contract"])), expected_contract)
        state = {name: npz[name] for name in KEPT}
    zeros = np.zeros_like(state["weights"])
    return {
        **state,
        "weights": replicate(state["weights"], mesh),
        "momentum": replicate(zeros, mesh),
        "cursor": int(state["cursor"]),
        "step": int(state["step"]),
    }
