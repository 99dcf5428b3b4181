"""The global masked-mean gradient and the momentum update, distributed with shard_map."""

import re
from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from shardlab.core.batch import REPLICATED, ROWS, VALUES
from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.devices import AXIS


def local_sums(features, targets, mask, weights):
    """(valid count, gradient numerator, loss numerator) of one partition.

    Padded slots contribute exactly zero whatever their contents: residuals are
    selected by the mask, not multiplied by it, so a NaN in padding cannot leak.
    """
    valid = mask > 0
    residual = jnp.where(valid, features @ weights - targets, 0.0)
    count = jnp.sum(valid.astype(features.dtype))
    grad_num = 2.0 * (residual @ jnp.where(valid[:, None], features, 0.0))
    loss_num = jnp.sum(residual * residual)
    return count, grad_num, loss_num


def apply_momentum(count, grad_num, loss_num, weights, momentum, learning_rate, decay):
    """Divide once by the global count, then v <- decay*v + g and w <- w - lr*v."""
    grad = grad_num / count
    loss = loss_num / count
    momentum = decay * momentum + grad
    return weights - learning_rate * momentum, momentum, loss, grad


def _sharded_body(features, targets, mask, weights, momentum, *, learning_rate, decay):
    count, grad_num, loss_num = local_sums(features, targets, mask, weights)
    count = jax.lax.psum(count, AXIS)
    grad_num = jax.lax.psum(grad_num, AXIS)
    loss_num = jax.lax.psum(loss_num, AXIS)
    return apply_momentum(count, grad_num, loss_num, weights, momentum, learning_rate, decay)


def make_step(mesh: Mesh, learning_rate: float = LEARNING_RATE, decay: float = DECAY, compiled: bool = True):
    """Return step(features, targets, mask, weights, momentum) -> (weights, momentum, loss, grad).

    Each device reduces its own rows; three `psum`s add count, gradient numerator and
    loss numerator over `data`; the division happens once, by the global count. The
    loss is taken before the update. `compiled=False` omits the outer `jit` (eager
    dispatch of the same mapped body).
    """
    return map_step(_sharded_body, mesh, learning_rate, decay, compiled)


def map_step(body, mesh: Mesh, learning_rate: float, decay: float, compiled: bool = True):
    """Wrap a per-device `body(features, targets, mask, weights, momentum, *, learning_rate, decay)`
    in `shard_map` with the course's placements (rows split over `data`, weights replicated)."""
    mapped = jax.shard_map(
        partial(body, learning_rate=float(learning_rate), decay=float(decay)),
        mesh=mesh,
        in_specs=(ROWS, VALUES, VALUES, REPLICATED, REPLICATED),
        out_specs=(REPLICATED, REPLICATED, REPLICATED, REPLICATED),
    )
    return jax.jit(mapped) if compiled else mapped


def make_single_device_step(learning_rate: float = LEARNING_RATE, decay: float = DECAY):
    """The same update on one device with no collectives (the single-device baseline)."""

    def step(features, targets, mask, weights, momentum):
        sums = local_sums(features, targets, mask, weights)
        return apply_momentum(*sums, weights, momentum, learning_rate, decay)

    return jax.jit(step)


ALL_REDUCE = re.compile(r'"stablehlo\.all_reduce"|stablehlo\.all_reduce\(')  # the op applied, generic or pretty


def count_all_reduce(ir_text: str) -> int:
    """Number of `stablehlo.all_reduce` operations applied in lowered IR text, a whole program or one line of it:
    `"stablehlo.all_reduce"(%7)` or `stablehlo.all_reduce(%7)`, never a mere mention of the name."""
    return len(ALL_REDUCE.findall(ir_text))


def all_reduce_lines(ir_text: str) -> list[str]:
    """The IR lines that open an all_reduce, stripped, for display."""
    return [line.strip() for line in ir_text.splitlines() if count_all_reduce(line)]
