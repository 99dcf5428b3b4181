"""Mistake: make_step takes its learning rate only when it is a Python int or float: a NumPy scalar or a 0-d array,
numbers Config accepts, falls back to the course's default learning rate."""

from shardlab.core.config import LEARNING_RATE
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import make_step as reference_make_step


def make_step(mesh, learning_rate=LEARNING_RATE, decay=0.8, compiled=True):
    if not isinstance(learning_rate, (int, float)):  # the mistake: a type test
        learning_rate = LEARNING_RATE
    return reference_make_step(mesh, learning_rate, decay, compiled)
