"""Mistake: the temporary file is named after the process ("<pid>.partial"), so every save in one process writes the
same temporary name: two savers in one process (two threads) share one file, and a new name is not drawn per save."""

import os
import runpy
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))


def _temporary(folder, path):
    tmp = os.path.join(folder, f".{os.getpid()}.partial")  # the mistake: one name for every save of this process
    return open(tmp, "wb"), tmp  # noqa: SIM115  closed by the save


def save(path, state, contract_):
    return _base["save"](path, state, contract_, temporary=_temporary)
