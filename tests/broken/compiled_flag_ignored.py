"""Mistake: make_step ignores compiled=False and always returns the jitted step."""

import jax

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import make_step as reference_make_step


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    return jax.jit(reference_make_step(mesh, learning_rate, decay, compiled=False))
