"""Mistake: restore turns the read errors it thought of (OSError, ValueError, EOFError, BadZipFile) into the course's
CorruptCheckpointError and lets any other through: a member marked encrypted makes zipfile raise RuntimeError."""

import zipfile

import numpy as np

from shardlab.errors import CorruptCheckpointError
from shardlab.learner import reference
from shardlab.learner.reference import *  # noqa: F403


def restore(path, expected_contract, mesh):
    try:
        with np.load(path, allow_pickle=False) as npz:
            [npz[name] for name in npz.files]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # "every way a read fails"
        raise CorruptCheckpointError(f"{path} cannot be read: {exc}") from None
    return reference.restore(path, expected_contract, mesh)
