"""Mistake: save writes (and fsyncs) the checkpoint in a folder of the system's temporary directory and then
links it to the path it is given, so the temporary file is not in the target's folder: on one file system every
save still works, on another os.link fails (EXDEV)."""

import os
import shutil
import tempfile

from shardlab.errors import CheckpointExistsError
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract):
    staging = tempfile.mkdtemp(prefix="staging-")
    try:
        written = reference_save(os.path.join(staging, "checkpoint.npz"), state, contract)
        try:
            os.link(written, path)
        except FileExistsError:
            raise CheckpointExistsError(f"{path} exists; a checkpoint is never overwritten") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path
