"""Mistake: compiled=False returns a plain global NumPy-style update, not the mapped body without jit."""

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.update import apply_momentum, local_sums
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import make_step as reference_make_step


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    if compiled:
        return reference_make_step(mesh, learning_rate, decay)

    def step(features, targets, mask, weights, momentum):
        return apply_momentum(*local_sums(features, targets, mask, weights), weights, momentum, learning_rate, decay)

    return step
