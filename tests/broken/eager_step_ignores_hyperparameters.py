"""Mistake: the un-jitted step (compiled=False) is built with the course's default learning rate and decay."""

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import make_step as reference_make_step


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    if not compiled:
        return reference_make_step(mesh, compiled=False)
    return reference_make_step(mesh, learning_rate, decay, compiled=True)
