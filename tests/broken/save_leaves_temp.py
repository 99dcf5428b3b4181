"""Mistake: save publishes a temporary file with os.link but never removes the temporary name."""

import runpy
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))


def save(path, state, contract_):
    return _base["save"](path, state, contract_, discard=lambda tmp: None)  # the mistake: the temporary name stays
