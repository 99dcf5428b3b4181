"""Mistake: transition places the step's new weights and momentum on the mesh again ("to be sure they are there"):
host copies put back replicated, the same values and placement, but not the arrays the step returned."""

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import next_batch


def transition(state, data, batch_size, step, mesh):
    state, batch = next_batch(state, data, batch_size, mesh)
    weights, momentum, loss, _ = step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])
    again = [jax.device_put(np.asarray(a), NamedSharding(mesh, P())) for a in (weights, momentum)]
    return {**state, "weights": again[0], "momentum": again[1], "step": int(state["step"]) + 1}, float(loss), batch.ids
