"""Mistake: transition builds its own step instead of using the one it is given (right only with the default
learning rate and decay)."""

from shardlab.learner import reference
from shardlab.learner.reference import *  # noqa: F403

_OWN = {}


def transition(state, data, batch_size, step, mesh):
    if mesh not in _OWN:
        _OWN[mesh] = reference.make_step(mesh)  # the course's defaults, whatever `step` was built with
    return reference.transition(state, data, batch_size, _OWN[mesh], mesh)
