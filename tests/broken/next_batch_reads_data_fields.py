"""Mistake: next_batch reads data.features and data.targets, which only the course's Dataset has."""

from shardlab.core.batch import next_batch as reference_next_batch
from shardlab.core.fixtures import Dataset
from shardlab.learner.reference import *  # noqa: F403


def next_batch(state, data, batch_size, mesh):
    return reference_next_batch(state, Dataset(data.features, data.targets), batch_size, mesh)
