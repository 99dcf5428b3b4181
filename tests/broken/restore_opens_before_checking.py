"""Mistake: restore opens the path to see that it is there before checking it, so a missing path, a folder or a
link that leads nowhere raises the operating system's error (FileNotFoundError, IsADirectoryError) instead of
the course's CorruptCheckpointError; every readable file, damaged or not, is judged as the reference judges it."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    with open(path, "rb") as handle:  # "is the file there?"
        handle.read(1)
    return reference_restore(path, expected_contract, mesh)
