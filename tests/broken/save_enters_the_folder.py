"""Mistake: save enters the checkpoint's folder (os.chdir) to publish by bare names, then goes back: meanwhile
every thread of the process resolves relative paths in that folder."""

import os
import runpy
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))


def _publish(tmp, path):
    back = os.getcwd()
    os.chdir(os.path.dirname(os.path.abspath(path)))
    try:
        _base["publish"](os.path.basename(tmp), os.path.basename(path))
    finally:
        os.chdir(back)


def save(path, state, contract_):
    return _base["save"](path, state, contract_, publish=_publish)
