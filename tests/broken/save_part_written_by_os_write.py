"""Mistake: save builds its bytes in memory and writes them with os.write into its own '.part' file before the
try whose finally removes it: when that write fails (a full disk), the '.part' file stays in the folder."""

import io
import os

import numpy as np

from shardlab.core import checkpoint
from shardlab.errors import CheckpointExistsError
from shardlab.learner.reference import *  # noqa: F403


def save(path, state, contract_):
    path = os.path.abspath(os.fspath(path))
    checkpoint.check_contract_form(contract_, f"refusing to save {path}")
    arrays = checkpoint.members(state, contract_)
    checkpoint._check_fields(arrays, contract_, f"refusing to save {path}")
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} already exists; use a new path")
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    part = f"{path}.{os.getpid()}-{os.urandom(6).hex()}.part"
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, buffer.getvalue())
    os.fsync(fd)
    os.close(fd)
    try:
        os.link(part, path)
    except FileExistsError:
        raise CheckpointExistsError(f"{path} appeared while saving; nothing was overwritten") from None
    finally:
        os.unlink(part)
    return path
