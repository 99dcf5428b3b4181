"""Mistake: the contract converts the configuration's NumPy float scalars with float() and copies every other number
as given: an np.float32 learning rate becomes plain JSON, a 0-d array or a NumPy integer (numbers Config accepts)
stays a NumPy value and the contract is no longer plain JSON."""

import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    numbers = {k: float(v) if isinstance(v, np.floating) else v for k, v in config.as_dict().items()}  # the mistake
    return {**reference_contract(data, config), **numbers}
