"""Mistake: save writes its bytes into its own '.part' file before the try whose finally removes it (that try
covers the publication only): when the write fails (a full disk), the '.part' file stays in the folder."""

import os
import runpy
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))


def _temporary(folder, path):
    part = f"{path}.{os.getpid()}-{os.urandom(6).hex()}.part"
    return open(part, "xb"), part  # noqa: SIM115  closed by the save


def _publish(part, path):
    try:
        _base["publish"](part, path)
    finally:
        os.unlink(part)  # the mistake: the only removal, reached once the write has succeeded


STEPS = {"temporary": _temporary, "publish": _publish, "discard": lambda part: None}


def save(path, state, contract_):
    return _base["save"](path, state, contract_, **STEPS)
