"""Mistake: save closes its temporary file only when the write succeeds: a write that raises (a full disk, Ctrl-C)
leaves the file open, one descriptor per failed save, though the temporary's name is removed."""

import runpy
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))


class _ClosedOnSuccess:
    """The temporary file, closed when its block ends without an error only."""

    def __init__(self, handle):
        self.handle = handle

    def __enter__(self):
        return self.handle

    def __exit__(self, kind, *_):
        if kind is None:  # the mistake: no close when the block raises
            self.handle.close()

    def __getattr__(self, name):
        return getattr(self.handle, name)


def _temporary(folder, path):
    handle, tmp = _base["temporary"](folder, path)
    return _ClosedOnSuccess(handle), tmp


def save(path, state, contract_):
    return _base["save"](path, state, contract_, temporary=_temporary)
