"""Mistake: make_step keeps its steps in a cache keyed by the mesh's shape (with the learning rate, decay and
`compiled`): a second mesh of the same shape but other devices gets the step built for the first, whose
shard_map runs on the first mesh's devices."""

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import make_step as reference_make_step

_STEPS = {}


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    key = (tuple(mesh.shape.items()), float(learning_rate), float(decay), bool(compiled))
    if key not in _STEPS:
        _STEPS[key] = reference_make_step(mesh, learning_rate, decay, compiled)
    return _STEPS[key]
