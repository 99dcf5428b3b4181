"""Mistake: initial keeps weights and momentum as host NumPy arrays; they never reach the devices."""

import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import initial as reference_initial


def initial(seed, data, mesh):
    state = reference_initial(seed, data, mesh)
    return {**state, "weights": np.asarray(state["weights"]), "momentum": np.asarray(state["momentum"])}
