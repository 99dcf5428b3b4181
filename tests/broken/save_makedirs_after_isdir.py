"""Mistake: save makes a missing folder with `if not os.path.isdir(folder): os.makedirs(folder)`, no exist_ok:
when another saver makes that folder between the check and the call, makedirs raises and this save fails,
though its own name was free."""

import contextlib
import os
import runpy
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_base = runpy.run_path(str(Path(__file__).parent / "base" / "save.py"))


@contextlib.contextmanager
def _folders(folder):
    made = not os.path.isdir(folder)
    if made:
        os.makedirs(folder)  # the mistake: a folder that appeared since the check raises FileExistsError
    try:
        yield
    except BaseException:
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise


def save(path, state, contract_):
    return _base["save"](path, state, contract_, folders=_folders)
