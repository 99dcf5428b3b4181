"""Mistake: the step is one global jit with no shard_map, so no device ever reduces anything."""

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.update import make_single_device_step
from shardlab.learner.reference import *  # noqa: F403


def make_step(mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
    return make_single_device_step(learning_rate, decay)
