"""Mistake: restore tells a permutation by its smallest id, its largest and its sum (0, rows - 1, rows(rows-1)/2): an
order with ids 1 and 3 both turned into 2 passes, though it is no permutation. Every other field is checked."""

import runpy
from pathlib import Path

import numpy as np

from shardlab.errors import CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403

_by_sum = runpy.run_path(str(Path(__file__).parent / "restore_permutation_by_sum.py"))  # range and sum


def restore(path, expected_contract, mesh):
    state = _by_sum["restore"](path, expected_contract, mesh)
    order = np.asarray(state["order"])
    if order.min() != 0 or order.max() != len(order) - 1:  # "its ends too: a permutation"
        raise CorruptCheckpointError(f"{path}: the order's ends are not 0 and rows - 1")
    return state
