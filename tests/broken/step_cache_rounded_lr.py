"""Mistake: make_step keeps the steps it built under the learning rate and decay rounded to 6 decimals, so a call
with a learning rate 2^-16 away gets the step built for the first one."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import make_step as reference_make_step

_STEPS = {}


def make_step(mesh, learning_rate=0.03, decay=0.8, compiled=True):
    key = (mesh, round(float(learning_rate), 6), round(float(decay), 6), compiled)
    if key not in _STEPS:
        _STEPS[key] = reference_make_step(mesh, learning_rate, decay, compiled)
    return _STEPS[key]
