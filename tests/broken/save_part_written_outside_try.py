"""Mistake: save writes its bytes into its own '.part' file before the try whose finally removes it: when that
write fails (a full disk), the '.part' file stays in the folder and a plain OSError escapes."""

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
    part = f"{path}.{os.getpid()}-{os.urandom(6).hex()}.part"
    with open(part, "xb") as handle:
        np.savez_compressed(handle, **arrays)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(part, path)
    except FileExistsError:
        raise CheckpointExistsError(f"{path} appeared while saving; nothing was overwritten") from None
    finally:
        os.unlink(part)
    return path
