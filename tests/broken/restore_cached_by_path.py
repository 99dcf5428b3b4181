"""Mistake: restore remembers what it read from each path and, asked for that path again, hands the state back
without reading the file or comparing its contract: another experiment's contract is accepted on a re-read path."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore

_READ = {}


def restore(path, expected_contract, mesh):
    key = os.path.abspath(os.fspath(path))
    if key not in _READ:
        _READ[key] = reference_restore(path, expected_contract, mesh)
    return dict(_READ[key])
