"""Mistake: restore removes every temporary in its folder before reading, live or not: a save that another thread
is running there at that moment loses its temporary."""

import contextlib
import os

from shardlab.core import files
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    folder = os.path.dirname(os.path.abspath(path))
    for name in os.listdir(folder):
        if name.startswith(files.TEMP):  # the mistake: a live writer's temporary goes too
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))
    return reference_restore(path, expected_contract, mesh)
