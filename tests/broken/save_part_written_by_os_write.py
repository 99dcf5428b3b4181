"""Mistake: save builds its bytes in memory and writes them with os.write into its own '.part' file before the
try whose finally removes it: when that write fails (a full disk), the '.part' file stays in the folder.

It is tests/broken/save_part_written_outside_try.py with the bytes written by os.write.
"""

import io
import os
import runpy
from pathlib import Path

import numpy as np

from shardlab.learner.reference import *  # noqa: F403

_outside_try = runpy.run_path(str(Path(__file__).parent / "save_part_written_outside_try.py"))


def _write(handle, arrays):
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    os.write(handle.fileno(), buffer.getvalue())
    os.fsync(handle.fileno())


def save(path, state, contract_):
    return _outside_try["_base"]["save"](path, state, contract_, **_outside_try["STEPS"], write=_write)
