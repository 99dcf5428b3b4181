"""Mistake: make_step keeps the step it built for NumPy or integer numbers under their types, not their values: a
later call given a learning rate and decay of the same types (another experiment) gets the first call's step."""

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import make_step as reference_make_step

_STEPS = {}


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    if isinstance(learning_rate, float) and isinstance(decay, float):
        return reference_make_step(mesh, learning_rate, decay, compiled)
    key = (mesh, type(learning_rate), type(decay), compiled)  # the mistake: the numbers' types, not their values
    if key not in _STEPS:
        _STEPS[key] = reference_make_step(mesh, learning_rate, decay, compiled)
    return _STEPS[key]
