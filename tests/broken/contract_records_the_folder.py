"""Mistake: the contract records the working folder ("where this experiment lives"), so the same experiment run from
another folder gets another contract."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    return {**reference_contract(data, config), "workdir": os.getcwd()}
