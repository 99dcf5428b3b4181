"""Mistake: the contract records the interpreter's path (`sys.executable`) as provenance, so a fresh process
started as `python3` instead of `python` (the same interpreter) gives another contract for the same inputs."""

import sys

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    return {**reference_contract(data, config), "interpreter": sys.executable}
