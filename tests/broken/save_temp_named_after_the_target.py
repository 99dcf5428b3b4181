"""Mistake: the temporary file is the target's name plus '.tmp', opened with truncation: two savers of one
checkpoint write, publish and remove the same temporary file."""

import os
import runpy
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))


def _temporary(folder, path):
    tmp = path + ".tmp"  # the mistake: derived from the target, and opened by whoever saves it
    return os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "wb"), tmp


def save(path, state, contract_):
    return _base["save"](path, state, contract_, temporary=_temporary)
