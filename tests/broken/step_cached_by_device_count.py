"""Mistake: make_step keeps the step it built for the first mesh of each size and hands it out again, so a mesh
of the same size on other devices gets a step bound to the first one."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import make_step as reference_make_step

_BUILT = {}


def make_step(mesh, learning_rate=0.03, decay=0.8, compiled=True):
    key = (mesh.size, learning_rate, decay, compiled)
    if key not in _BUILT:
        _BUILT[key] = reference_make_step(mesh, learning_rate=learning_rate, decay=decay, compiled=compiled)
    return _BUILT[key]
