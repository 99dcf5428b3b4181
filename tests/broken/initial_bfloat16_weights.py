"""Mistake: initial makes its zero weights and momentum in bfloat16, not float32 (zeros look alike in any dtype)."""

import jax.numpy as jnp

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import initial as reference_initial


def initial(seed, data, mesh):
    state = reference_initial(seed, data, mesh)
    return {**state, **{name: state[name].astype(jnp.bfloat16) for name in ("weights", "momentum")}}
