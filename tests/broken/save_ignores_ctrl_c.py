"""Mistake: save ignores Ctrl-C while it writes (signal.signal(SIGINT, SIG_IGN), put back after): signal.signal
works only in the main thread, so a save called from a background checkpointing thread raises ValueError."""

import signal

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract_):
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the mistake: main thread only
    try:
        return reference_save(path, state, contract_)
    finally:
        signal.signal(signal.SIGINT, previous)
