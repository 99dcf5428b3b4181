"""Mistake: initial keeps the state it built for a seed and returns that same dict at every later call: a caller that
edits one state (its cursor, its step) edits the state every later initial hands out."""

from shardlab.learner import reference
from shardlab.learner.reference import *  # noqa: F403

_KEPT = {}


def initial(seed, data, mesh):
    key = (seed, tuple(data[0].shape), mesh)
    if key not in _KEPT:
        _KEPT[key] = reference.initial(seed, data, mesh)
    return _KEPT[key]
