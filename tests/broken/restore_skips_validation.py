"""Mistake: restore compares the contract, then trusts every array (no shape, range or permutation check)."""

import json

import numpy as np

from shardlab.core.checkpoint import check_contract
from shardlab.core.state import replicate
from shardlab.learner.reference import *  # noqa: F403

FIELDS = ("weights", "momentum", "key", "order", "cursor", "step")


def restore(path, expected_contract, mesh):
    with np.load(path) as npz:
        check_contract(json.loads(str(npz["contract"])), expected_contract)
        state = {name: npz[name] for name in FIELDS if name in npz.files}
    state.setdefault("momentum", np.zeros_like(state["weights"]))
    return {
        **state,
        "weights": replicate(state["weights"], mesh),
        "momentum": replicate(state["momentum"], mesh),
        "cursor": int(state["cursor"]),
        "step": int(state["step"]),
    }
