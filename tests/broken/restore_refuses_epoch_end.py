"""Mistake: restore takes the cursor bound as 0 <= cursor < rows, refusing a checkpoint saved at an epoch's end."""

import numpy as np

from shardlab.errors import CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    try:
        with np.load(path, allow_pickle=False) as npz:
            cursor = np.asarray(npz["cursor"]) if "cursor" in npz.files else None
    except Exception as exc:
        raise CorruptCheckpointError(f"{path} is not a readable checkpoint: {exc}") from None
    if cursor is not None and cursor.size == 1 and int(cursor) >= expected_contract["features_shape"][0]:
        raise CorruptCheckpointError(f"{path}: cursor out of range")
    return reference_restore(path, expected_contract, mesh)
