"""Mistake: temporary names come from random.Random(0), so every process draws the same sequence of names and
two savers in two processes write the same temporary file."""

import os
import random
import runpy
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))
_NAMES = random.Random(0)  # the mistake: the same names, in the same order, in every process


def _temporary(folder, path):
    tmp = os.path.join(folder, f".tmp-{_NAMES.randrange(10**9)}.npz")
    return os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb"), tmp


def save(path, state, contract_):
    return _base["save"](path, state, contract_, temporary=_temporary)
