"""Mistake: contract keeps each contract it computed and returns that same dict again for equal inputs: a caller
that adds or removes an entry of one contract changes every later one."""

import json

from shardlab.learner import reference
from shardlab.learner.reference import *  # noqa: F403

_KEPT = {}


def contract(data, config):
    computed = reference.contract(data, config)
    return _KEPT.setdefault(json.dumps(computed, sort_keys=True), computed)
