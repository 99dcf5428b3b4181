"""Mistake: save changes the working folder to the target's folder (os.chdir) and writes the bare file name
there, then returns that name: the file lands at the path given, but the returned name and every later relative
path of the caller now resolve from another folder."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract_):
    folder, name = os.path.split(os.fspath(path))
    if folder:
        os.chdir(folder)
    return reference_save(name, state, contract_)
