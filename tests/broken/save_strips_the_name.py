"""Mistake: save strips spaces from the ends of the path ("tidy input"): a name ' run.ckpt ' is written as
'run.ckpt', beside or onto another file, and the caller's restore(path) finds nothing."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract_):
    return reference_save(os.fspath(path).strip(), state, contract_)
