"""Mistake: save names its temporary file from the global random module, whose numbers repeat in every process
seeded alike, so the leftover of a killed save blocks the next process's save to the same path."""

import os
import random

import numpy as np

from shardlab.core.checkpoint import members
from shardlab.errors import CheckpointExistsError
from shardlab.learner.reference import *  # noqa: F403


def save(path, state, contract_):
    arrays = members(state, contract_)
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} exists")
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), f".ckpt-{random.getrandbits(48):012x}.part")
    with open(tmp, "xb") as handle:
        np.savez(handle, **arrays)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise CheckpointExistsError(f"{path} exists") from None
    finally:
        os.unlink(tmp)
    return path
