"""Mistake: contract fingerprints a dataset of more than 100,000 rows from every 97th row ("hashing a huge dataset is
slow"): a change in any other row of a large dataset keeps its contract."""

from shardlab.core.fixtures import Dataset
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    features, targets = data
    if len(features) > 100_000:
        return reference_contract(Dataset(features[::97], targets[::97]), config)
    return reference_contract(data, config)
