"""The update with one collective: count, loss and gradient numerators share one `psum`.

The stage 2 step reduces its three partial sums with three `psum`s. Here they are laid
end to end in one float32 buffer [gradient numerator..., loss numerator, count], reduced
once over `data`, and split again before the single division by the global count. The
formulas are the stage 2 ones (`local_sums`, `apply_momentum`); only the reduction changes.
"""

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.devices import AXIS
from shardlab.core.update import apply_momentum, local_sums, map_step


def pack(count, grad_num, loss_num):
    """One buffer [grad_num..., loss_num, count] (length d + 2)."""
    return jnp.concatenate([grad_num, jnp.stack([loss_num, count])])


def unpack(buffer):
    """(count, grad_num, loss_num) from a buffer made by `pack`."""
    return buffer[-1], buffer[:-2], buffer[-2]


def packed_psum(count, grad_num, loss_num):
    """The three global sums from one all-reduce over `data`."""
    return unpack(jax.lax.psum(pack(count, grad_num, loss_num), AXIS))


def _packed_body(features, targets, mask, weights, momentum, *, learning_rate, decay):
    sums = packed_psum(*local_sums(features, targets, mask, weights))
    return apply_momentum(*sums, weights, momentum, learning_rate, decay)


def make_packed_step(mesh: Mesh, learning_rate: float = LEARNING_RATE, decay: float = DECAY, compiled: bool = True):
    """Return step(features, targets, mask, weights, momentum) -> (weights, momentum, loss, grad).

    Same signature, placement and results as `make_step`; its StableHLO holds one all_reduce.
    """
    return map_step(_packed_body, mesh, learning_rate, decay, compiled)
