"""Mistake: save removes its temporary file and the folders it made on an Exception or a KeyboardInterrupt only,
the interruptions its author thought of: a process told to end (SystemExit from a SIGTERM handler's sys.exit, or
any other BaseException) during the write leaves both behind."""

import contextlib
import os
import runpy
import sys
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))
NAMED = (Exception, KeyboardInterrupt)  # the mistake: a list, where BaseException (or finally) takes every one


@contextlib.contextmanager
def _folders(folder):
    missing, head = [], os.path.abspath(folder)
    while not os.path.lexists(head):
        missing.append(head)
        head = os.path.dirname(head)
    os.makedirs(folder, exist_ok=True)
    try:
        yield
    except NAMED:
        for made in missing:
            with contextlib.suppress(OSError):
                os.rmdir(made)
        raise


def _discard(tmp):
    if isinstance(sys.exc_info()[1], (*NAMED, type(None))):
        _base["discard"](tmp)


def save(path, state, contract_):
    return _base["save"](path, state, contract_, folders=_folders, discard=_discard)
