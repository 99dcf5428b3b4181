"""Mistake: save takes a symbolic link that leads nowhere for a stale name, removes it, then saves there; a link to
a file is still refused. A link is a name someone made, wherever it leads (rule:never-overwrite)."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract_):
    if os.path.islink(path) and not os.path.exists(path):  # "nothing is there"
        os.remove(path)
    return reference_save(path, state, contract_)
