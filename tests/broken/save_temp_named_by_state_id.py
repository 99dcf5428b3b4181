"""Mistake: save names its temporary from the process id and the state object's id(): two saves of one state to two
names in one process (two threads of a checkpointer) take the same name, and the second finds it taken."""

import os
import runpy
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))


def save(path, state, contract_):
    def temporary(folder, _path):
        tmp = os.path.join(folder, f".tmp-{os.getpid()}-{id(state):x}.npz")  # the mistake: shared by two saves
        return open(tmp, "xb"), tmp  # noqa: SIM115  closed by the save

    return _base["save"](path, state, contract_, temporary=temporary)
