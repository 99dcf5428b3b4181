"""Mistake: initial remembers the first state it made for each seed and hands it back for any data and mesh.

The state is right the first time a seed is seen; a later call with the same seed and data of another shape gets
weights and an order of the earlier shape.
"""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import initial as reference_initial

_MADE = {}


def initial(seed, data, mesh):
    if seed not in _MADE:
        _MADE[seed] = reference_initial(seed, data, mesh)
    return dict(_MADE[seed])
