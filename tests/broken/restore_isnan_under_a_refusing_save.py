"""Mistake: restore, with the course's checksum, tests weights and momentum with np.isnan only: +inf and -inf pass.

Its save is the course's, which refuses a diverged state: no file of this save ever holds a non-finite value, so only
a checkpoint in the course's format whose integrity hash was recomputed over an infinite value tells the restore's
test apart from a finiteness test. The restore is tests/broken/restore_leaves_finiteness_to_the_checksum.py's with a
NaN test of both float fields."""

import importlib.util
from pathlib import Path

import numpy as np

from shardlab.errors import CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403

_SPEC = importlib.util.spec_from_file_location(
    "isnan_under_a_refusing_save", Path(__file__).parent / "restore_leaves_finiteness_to_the_checksum.py"
)
_course = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_course)
_fields = _course._fields_but_finite


def _fields_and_nan(arrays, expected, where):
    _fields(arrays, expected, where)
    if any(np.isnan(arrays[name]).any() for name in ("weights", "momentum") if name in arrays):  # the mistake
        raise CorruptCheckpointError(f"{where}: NaN weights or momentum")


_course._fields_but_finite = _fields_and_nan
restore = _course.restore  # save stays the course's, which refuses non-finite values
