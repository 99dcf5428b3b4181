"""Mistake: the contract's data digest is a hash of the pickled data object, so the same arrays passed as the
course's Dataset and as a plain (features, targets) tuple give two contracts."""

import hashlib
import pickle

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    found = reference_contract(data, config)
    return {**found, "data_sha256": hashlib.sha256(pickle.dumps(data)).hexdigest()}
