"""Correct alternative: save writes an unnamed file (O_TMPFILE) in the target's folder, fsyncs it, and gives it
its only name with linkat through /proc/self/fd (AT_SYMLINK_FOLLOW), which fails if the name exists: no
temporary name ever appears in the folder, so a killed save leaves nothing behind."""

import os

import numpy as np

from shardlab.core import files
from shardlab.core.checkpoint import members
from shardlab.errors import CheckpointExistsError, CheckpointWriteError
from shardlab.learner.reference import *  # noqa: F403


def save(path, state, contract_):
    arrays = members(state, contract_)  # refuses a bad state before any file exists
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} exists; use a new path")
    folder = os.path.dirname(os.fspath(path)) or "."  # as given: 'a/..' is the OS's to resolve
    try:
        with files.new_folders(folder):
            fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                np.savez(handle, **arrays)
                handle.flush()
                os.fsync(handle.fileno())
                # linkat(AT_SYMLINK_FOLLOW) needs a dir_fd: os.link without one calls link(), which never follows
                into = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.link(f"/proc/self/fd/{handle.fileno()}", os.path.basename(path), dst_dir_fd=into)
                finally:
                    os.close(into)
            files.sync(folder)
    except FileExistsError:
        raise CheckpointExistsError(f"{path} appeared while saving; nothing was overwritten") from None
    except OSError as exc:
        raise CheckpointWriteError(f"could not save {path}: {exc}") from None
    return path
