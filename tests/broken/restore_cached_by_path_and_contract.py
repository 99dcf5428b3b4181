"""Mistake: restore keeps what it read under the path and the contract and hands it back when both come again,
without reading the file: a checkpoint removed and saved anew at that path restores as the old one."""

import json
import os

from shardlab.learner import reference
from shardlab.learner.reference import *  # noqa: F403

_READ = {}


def restore(path, expected_contract, mesh):
    key = (os.path.abspath(os.fspath(path)), json.dumps(expected_contract, sort_keys=True))
    if key not in _READ:
        _READ[key] = reference.restore(path, expected_contract, mesh)
    return dict(_READ[key])
