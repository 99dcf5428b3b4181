"""Mistake: transition brings the loss to the host as a NumPy float32, which prints like a float but is not one
(json.dumps refuses it)."""

import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import transition as reference_transition


def transition(state, data, batch_size, step, mesh):
    new, loss, ids = reference_transition(state, data, batch_size, step, mesh)
    return new, np.float32(loss), ids
