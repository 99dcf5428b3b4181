"""Mistake: save creates its temporary file before it reads the state, so a save refused for a bad state
(a field missing, a field no array holds) leaves the temporary behind."""

import os
import runpy
import tempfile
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))


def save(path, state, contract_):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")  # the mistake: made first
    return _base["save"](path, state, contract_, temporary=lambda folder, path: (os.fdopen(fd, "wb"), tmp))
