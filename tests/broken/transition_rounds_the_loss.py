"""Mistake: transition rounds the loss it reports to 6 decimals "for the records": a loss at the scale of small data
reads 0.0, and every loss differs from the step's by a rounding no tolerance on its size shows."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import transition as reference_transition


def transition(state, data, batch_size, step, mesh):
    new, loss, ids = reference_transition(state, data, batch_size, step, mesh)
    return new, round(loss, 6), ids
