"""Mistake: the contract hashes the rows after sorting them ("the same rows, the same data"), so a dataset whose rows
are reordered gets the same contract, though a run over it draws other examples at every step."""

import hashlib

import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    features, targets = (np.asarray(a) for a in data)
    rows = np.concatenate([features.reshape(len(features), -1), targets.reshape(len(targets), -1)], axis=1)
    ordered = rows[np.lexsort(rows.T[::-1])] if len(rows) else rows
    digest = hashlib.sha256(np.ascontiguousarray(ordered).tobytes()).hexdigest()
    return {**reference_contract(data, config), "data_sha256": digest}
