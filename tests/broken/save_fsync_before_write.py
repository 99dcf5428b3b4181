"""Mistake: save fsyncs its temporary file before writing it, then publishes it: a crash after publishing can find
a file whose bytes never reached the disk."""

import os
import runpy
from pathlib import Path

import numpy as np

from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))


def _write(handle, arrays):
    os.fsync(handle.fileno())  # the mistake: the fsync comes before the bytes it should make durable
    np.savez(handle, **arrays)


def save(path, state, contract_):
    return _base["save"](path, state, contract_, write=_write)
