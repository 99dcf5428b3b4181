"""Mistake: save stores momentum as float16 (half the bytes) and restore casts it back to float32: every member is
there, but momentum comes back rounded, and the resumed run leaves the uninterrupted one."""

import json

import numpy as np

from shardlab.core.checkpoint import check_contract
from shardlab.core.state import FIELDS, replicate
from shardlab.learner.reference import *  # noqa: F403


def save(path, state, contract_):
    arrays = {name: np.asarray(state[name]) for name in FIELDS}
    arrays["momentum"] = arrays["momentum"].astype(np.float16)
    with open(path, "xb") as handle:
        np.savez(handle, contract=json.dumps(contract_), **arrays)
    return path


def restore(path, expected_contract, mesh):
    with np.load(path, allow_pickle=False) as npz:
        check_contract(json.loads(str(npz["contract"])), expected_contract)
        state = {name: npz[name] for name in FIELDS}
    momentum = state["momentum"].astype(np.float32)
    return {
        **state,
        "weights": replicate(state["weights"], mesh),
        "momentum": replicate(momentum, mesh),
        "cursor": int(state["cursor"]),
        "step": int(state["step"]),
    }
