"""Mistake: save takes a relative path as relative to the working folder the file was imported in, kept in a
module variable, not to the working folder at the call."""

import os

from shardlab.learner import reference
from shardlab.learner.reference import *  # noqa: F403

_STARTED_IN = os.getcwd()


def save(path, state, contract_):
    return reference.save(os.path.join(_STARTED_IN, os.fspath(path)), state, contract_)
