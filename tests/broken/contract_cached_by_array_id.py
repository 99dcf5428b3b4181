"""Mistake: contract keeps each contract by the id() of the data arrays and the configuration: the same arrays,
changed in place, get the contract of the values they held before. The arrays are kept too, so no id is reused
while its contract is kept."""

from shardlab.learner import reference
from shardlab.learner.reference import *  # noqa: F403

_KEPT = {}


def contract(data, config):
    features, targets = data
    key = (id(features), id(targets), repr(config))  # repr: a configuration may hold 0-d arrays, which do not hash
    if key not in _KEPT:
        _KEPT[key] = (features, targets), reference.contract(data, config)
    return dict(_KEPT[key][1])
