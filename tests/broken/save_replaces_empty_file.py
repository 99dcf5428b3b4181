"""Mistake: save takes an existing empty file for the leftover of a killed save and removes it, then saves there;
a non-empty file or a folder is still refused. An existing path is never a save's to remove, whatever it holds
(rule:never-overwrite)."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract_):
    if os.path.isfile(path) and os.path.getsize(path) == 0:  # "a killed save's leftover"
        os.unlink(path)
    return reference_save(path, state, contract_)
