"""Mistake: next_batch keeps a copy of the data by the id() of its arrays: the same arrays, changed in place, give
the rows they held at the first call. The arrays are kept too, so no id is reused while its copy is kept."""

import numpy as np

from shardlab.learner import reference
from shardlab.learner.reference import *  # noqa: F403

_KEPT = {}


def next_batch(state, data, batch_size, mesh):
    features, targets = data
    key = (id(features), id(targets))
    if key not in _KEPT:
        _KEPT[key] = (features, targets), (np.array(features), np.array(targets))
    return reference.next_batch(state, _KEPT[key][1], batch_size, mesh)
