"""Mistake: save publishes its temporary file with renameat2(RENAME_NOREPLACE) through ctypes (a call no Python
file function makes) before fsyncing it, and fsyncs it under its final name: the name points at bytes still in
memory."""

import ctypes
import os
import runpy
from pathlib import Path

import numpy as np

from shardlab.core import files
from shardlab.errors import CheckpointExistsError
from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))


def _write(handle, arrays):
    np.savez(handle, **arrays)
    handle.flush()


def _publish(tmp, path):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, os.fsencode(tmp), -100, os.fsencode(path), 1) != 0:  # AT_FDCWD, RENAME_NOREPLACE
        raise CheckpointExistsError(f"{path} appeared while saving") if ctypes.get_errno() == 17 else OSError(path)
    files.sync(path)  # the mistake: the bytes are made durable only after the final name exists


def save(path, state, contract_):
    return _base["save"](path, state, contract_, write=_write, publish=_publish)
