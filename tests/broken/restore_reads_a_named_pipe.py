"""Mistake: restore reads the file once before checking it and turns an OSError into the course's error, but opens
whatever is at the path: a named pipe (FIFO) with no writer blocks that read forever."""

from shardlab.errors import CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    try:
        with open(path, "rb") as handle:  # "is it readable?"
            handle.read()
    except OSError as exc:
        raise CorruptCheckpointError(f"{path}: {exc}") from exc
    return reference_restore(path, expected_contract, mesh)
