"""Mistake: make_step refuses a learning rate or decay that is not a Python float ("catch a typo early"), but Config
accepts an int (learning_rate=1, decay=0) and a NumPy scalar (np.float32(0.8))."""

from shardlab import errors
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import make_step as reference_make_step


def make_step(mesh, learning_rate=0.03, decay=0.8, compiled=True):
    for name, value in (("learning_rate", learning_rate), ("decay", decay)):
        if not isinstance(value, float):
            raise errors.ConfigError(f"{name} must be a float, got {value!r}")
    return reference_make_step(mesh, learning_rate, decay, compiled)
