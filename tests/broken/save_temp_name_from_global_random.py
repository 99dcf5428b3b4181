"""Mistake: save names its temporary file from the global random module, whose numbers repeat in every process
seeded alike, so the leftover of a killed save blocks the next process's save to the same path."""

import os
import random
import runpy
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))


def _temporary(folder, path):
    tmp = os.path.join(folder, f".ckpt-{random.getrandbits(48):012x}.part")  # the mistake: the global generator
    return open(tmp, "xb"), tmp  # noqa: SIM115  closed by the save


def save(path, state, contract_):
    return _base["save"](path, state, contract_, temporary=_temporary)
