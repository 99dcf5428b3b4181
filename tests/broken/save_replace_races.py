"""Mistake: save checks that the path is free, writes a temporary file, then os.replace()s it into place.

The check and the rename are two steps: another saver that publishes in between is silently replaced.
"""

import os
import runpy
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))


def save(path, state, contract_):
    return _base["save"](path, state, contract_, publish=os.replace)  # the mistake: replaces whatever is there
