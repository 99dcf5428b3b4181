"""Mistake: make_step accepts learning_rate and decay but uses the course's default values."""

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import make_step as reference_make_step


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    return reference_make_step(mesh, compiled=compiled)
