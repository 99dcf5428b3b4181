"""Mistake: save always writes to `<path>.partial`, opened exclusively: a killed save's leftover refuses later saves."""

import runpy
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))


def _temporary(folder, path):
    tmp = f"{path}.partial"  # the mistake: one fixed name per target, whoever saves and whenever
    return open(tmp, "xb"), tmp  # noqa: SIM115  closed by the save


def save(path, state, contract_):
    return _base["save"](path, state, contract_, temporary=_temporary)
