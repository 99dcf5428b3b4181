"""Mistake: restore, with the course's checksum, tests the momentum for finiteness but not the weights ("weights are
just parameters"): NaN weights in a checkpoint whose integrity hash matches them come back.

Its save is the course's, which refuses a diverged state, so only a checkpoint in the course's format whose integrity
hash was recomputed over a non-finite weight shows the gap. The restore is
tests/broken/restore_leaves_finiteness_to_the_checksum.py's with the momentum's finiteness tested again."""

import importlib.util
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_SPEC = importlib.util.spec_from_file_location(
    "finite_momentum_only", Path(__file__).parent / "restore_leaves_finiteness_to_the_checksum.py"
)
_course = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_course)
_course.FINITE = ("momentum",)  # the mistake: the weights are not tested
restore = _course.restore  # save stays the course's, which refuses non-finite values
