"""Mistake: restore bounds its read with signal.alarm(10) and a SIGALRM handler: both work only in the main
thread, so a restore called from a background thread raises ValueError."""

import signal

from shardlab.errors import CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    def too_slow(signum, frame):
        raise CorruptCheckpointError(f"{path}: reading took more than 10 s")

    previous = signal.signal(signal.SIGALRM, too_slow)  # the mistake: main thread only
    signal.alarm(10)
    try:
        return reference_restore(path, expected_contract, mesh)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
