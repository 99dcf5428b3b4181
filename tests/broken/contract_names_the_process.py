"""Mistake: the contract records which process wrote it, so a fresh interpreter never sees an equal contract."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    return {**reference_contract(data, config), "writer": f"pid {os.getpid()}"}
