"""The save the planted save mistakes start from: the course's steps, each one a function a mistake replaces.

`save(path, state, contract, **steps)` turns the state into the checkpoint's members and checks them,
refuses a taken path, makes the missing folders (removing them again if the save raises), clears dead
savers' temporaries, opens a temporary file beside the target, writes and fsyncs it, hard-links it to
the target, fsyncs the folder and removes the temporary name. A planted file passes the one step it
gets wrong (`save(path, state, contract_, write=_write)`), so it states its mistake in those few lines;
it loads this file with `runpy.run_path`, from beside it in tests/broken/. This file is no case: nothing
checks it on its own.
"""

import os

import numpy as np

from shardlab.core import checkpoint, files
from shardlab.errors import CheckpointExistsError, CheckpointWriteError


def temporary(folder, path):
    """(an open binary file, its name): a new temporary of the course's scheme in the target's own folder."""
    fd, tmp = files.temporary(folder, ".npz")
    return os.fdopen(fd, "wb"), tmp


def write(handle, arrays):
    """The arrays as an NPZ, flushed and fsynced: on the disk before the file gets its final name."""
    np.savez(handle, **arrays)
    handle.flush()
    os.fsync(handle.fileno())


def publish(tmp, path):
    """`path` made a second name of the written temporary (never an overwrite), then the folder fsynced."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise CheckpointExistsError(f"{path} appeared while saving; nothing was overwritten") from None
    files.sync(os.path.dirname(os.path.abspath(path)))


def discard(tmp):
    """The temporary name removed, whether the save published or raised."""
    if os.path.lexists(tmp):
        os.unlink(tmp)


def save(
    path,
    state,
    contract,
    *,
    members=checkpoint.members,
    folders=files.new_folders,
    temporary=temporary,
    write=write,
    publish=publish,
    discard=discard,
):
    """The course's save through the steps given; the step a planted file passes is its mistake."""
    path = os.fspath(path)
    checkpoint.check_contract_form(contract, f"refusing to save {path}")
    arrays = members(state, contract)
    checkpoint._check_fields(arrays, contract, f"refusing to save {path}")
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} already exists; use a new path")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        with folders(folder):
            checkpoint.remove_stale(folder)
            handle, tmp = temporary(folder, path)
            try:
                with handle:
                    write(handle, arrays)
                publish(tmp, path)
            finally:
                discard(tmp)
    except CheckpointExistsError:
        raise
    except OSError as exc:
        raise CheckpointWriteError(f"writing {path} failed ({exc}); nothing was published") from None
    return path
