"""Mistake: restore refuses a file larger than a checkpoint of the expected experiment can be before it reads the
saved contract, so a larger experiment's checkpoint is refused as corrupt instead of as another experiment's."""

import os

from shardlab.errors import CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    rows, features = expected_contract["features_shape"]
    limit = 4 * (rows * features + 3 * rows + 2 * features) + 64 * 1024  # the expected arrays and room for headers
    if os.path.getsize(path) > limit:
        raise CorruptCheckpointError(f"{path} has {os.path.getsize(path)} bytes, more than a checkpoint can hold")
    return reference_restore(path, expected_contract, mesh)
