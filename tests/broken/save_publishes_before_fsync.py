"""Mistake: save writes its temporary file, links it to the final name, and only then fsyncs it: a crash between
the link and the fsync can leave a published checkpoint whose bytes never reached the disk."""

import runpy
from pathlib import Path

import numpy as np

from shardlab.core import files
from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))


def _write(handle, arrays):
    np.savez(handle, **arrays)
    handle.flush()


def _publish(tmp, path):
    _base["publish"](tmp, path)
    files.sync(tmp)  # the mistake: the bytes are made durable only after the final name exists


def save(path, state, contract_):
    return _base["save"](path, state, contract_, write=_write, publish=_publish)
