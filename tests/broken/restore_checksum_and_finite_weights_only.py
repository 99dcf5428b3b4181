"""Mistake: restore, with the course's checksum, tests the weights for finiteness but not the momentum.

It is tests/broken/restore_leaves_finiteness_to_the_checksum.py (whose save writes a diverged state with a checksum
of its own) with the weights' finiteness tested again."""

import importlib.util
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_SPEC = importlib.util.spec_from_file_location(
    "finite_weights_only", Path(__file__).parent / "restore_leaves_finiteness_to_the_checksum.py"
)
_course = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_course)
_course.FINITE = ("weights",)  # the mistake: momentum is not tested
save, restore = _course.save, _course.restore
