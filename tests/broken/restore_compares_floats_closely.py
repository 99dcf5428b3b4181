"""Mistake: restore compares the contracts' float entries with math.isclose ("floats are never compared with =="):
a learning rate or decay one float64 step apart, another experiment, is taken for this one."""

import json
import math

import numpy as np

from shardlab.core.checkpoint import restore as reference_restore
from shardlab.learner.reference import *  # noqa: F403


def _same(a, b):
    return math.isclose(a, b) if isinstance(a, float) and isinstance(b, float) else a == b


def restore(path, expected_contract, mesh):
    try:
        with np.load(path, allow_pickle=False) as npz:
            found = json.loads(str(npz["contract"][()]))
    except Exception:
        found = None  # the course's restore refuses what it cannot read
    if isinstance(found, dict) and found.keys() == expected_contract.keys():
        if all(_same(found[k], expected_contract[k]) for k in found):
            expected_contract = found  # "the same experiment"
    return reference_restore(path, expected_contract, mesh)
