"""Mistake: the compiled step donates the weights and momentum buffers, so the caller's old state is deleted."""

import jax

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import make_step as reference_make_step


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    mapped = reference_make_step(mesh, learning_rate, decay, compiled=False)
    return jax.jit(mapped, donate_argnums=(3, 4)) if compiled else mapped
