"""Mistake: the compiled=False branch is built separately and hard-codes momentum 0.9."""

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import make_step as reference_make_step


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    if compiled:
        return reference_make_step(mesh, learning_rate, decay)
    return reference_make_step(mesh, learning_rate, 0.9, compiled=False)
