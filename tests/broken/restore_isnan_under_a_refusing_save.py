"""Mistake: restore, with the course's checksum, tests weights and momentum with np.isnan only: +inf and -inf pass.

Its save is the course's, which refuses a diverged state: no file of this save ever holds a non-finite value, so only
a checkpoint in the course's format whose integrity hash was recomputed over an infinite value tells the restore's
test apart from a finiteness test. The restore is tests/broken/restore_checksum_and_isnan.py's."""

import importlib.util
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_SPEC = importlib.util.spec_from_file_location(
    "isnan_under_a_refusing_save", Path(__file__).parent / "restore_checksum_and_isnan.py"
)
_isnan = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_isnan)
restore = _isnan.restore  # save stays the course's, which refuses non-finite values
