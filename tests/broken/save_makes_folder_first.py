"""Mistake: save creates the checkpoint's folder before it checks the state, so a refused save into a folder that
did not exist leaves that folder behind."""

import os

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract_):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return reference_save(path, state, contract_)
