"""Mistake: restore compares only the contract members both contracts have, so a saved contract with a member less
or a member more passes; its integrity checksum still refuses a contract edited in the file. The restore of
restore_compares_the_expected_keys.py, with this comparison in place of that one."""

import runpy
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_kept = runpy.run_path(str(Path(__file__).parent / "restore_compares_the_expected_keys.py"))


def _differs(found, expected) -> bool:
    return any(found[k] != expected[k] for k in set(found) & set(expected))  # the mistake


restore = _kept["restore"]
restore.__globals__["_differs"] = _differs  # run_path hands back a copy of the globals restore reads
