"""The cost model's constants on this host: alpha, the betas, gamma and delta from tiny shard_map programs.

None of the programs is one of `shardlab.perf.costmodel.VARIANTS`: the model is fitted on operations
that stand apart from what it predicts. The sweep calibrates once at its start and scores the
model's pick with these constants.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from shardlab.core.devices import AXIS
from shardlab.perf.costmodel import warm_seconds

SHARDED = P(AXIS)  # each device's block of a vector


def _best_us(fn, args, samples: int = 9) -> float:
    """The fastest of `samples` warm calls, in us: a constant for the model, not a typical time under load."""
    return 1e6 * warm_seconds(fn, args, samples, np.min)


def calibrate(mesh, k: int = 100, big: int = 1 << 18) -> dict:
    """This host's alpha, betas and gamma from tiny shard_map programs (none of them a variant)."""

    def mapped(fn, specs=SHARDED):
        return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=specs, out_specs=P()))

    def scan(op):  # K steps carrying a replicated vector; `op(carry, my shard)`
        run = lambda c, x: jax.lax.scan(lambda c, _: (op(c, x), None), c, None, length=k)[0]  # noqa: E731
        return mapped(run, (P(), P(AXIS)))

    small = (jnp.ones(8, jnp.float32), jnp.ones(mesh.size * 8, jnp.float32))
    bare = _best_us(scan(lambda c, x: c * 1.0001), small)
    alpha = (_best_us(scan(lambda c, x: c + jax.lax.psum(x * c, AXIS)), small) - bare) / k
    large = jnp.ones(mesh.size * big, jnp.float32)
    reduce_us = _best_us(mapped(lambda x: jax.lax.psum(x, AXIS)), (large,)) - alpha
    gather = mapped(lambda x: jax.lax.all_gather(x, AXIS, tiled=True, to="invarying"))
    gather_us = _best_us(gather, (jnp.ones(big, jnp.float32),)) - alpha
    rows = jnp.ones((mesh.size * 256, 256), jnp.float32)
    gram = mapped(lambda x: jax.lax.psum(jnp.sum(x @ (x.T @ x)), AXIS))  # 4 x 256^3 flops per device
    flop_us = _best_us(gram, (rows,))
    weights, table = jnp.ones(64, jnp.float32), jnp.ones((1024, 64), jnp.float32)
    picks = (np.arange(k * 256).reshape(k, 256) * 389) % 1024  # 256 scattered rows a step, like a batch's slots

    def reads(c, x, picks):  # K steps: gather 256 rows (indices known only at run time), X w, then r X
        def one(c, index):
            rows = x[index]
            return jnp.tanh((rows @ c) @ rows), None

        c = jax.lax.pcast(c, AXIS, to="varying")
        return jax.lax.psum(jax.lax.scan(one, c, picks)[0], AXIS)  # one psum after the loop

    run = jax.jit(jax.shard_map(reads, mesh=mesh, in_specs=(P(), P(), P()), out_specs=P()))
    step_us = (_best_us(run, (weights, table, jnp.asarray(picks, jnp.int32))) - bare) / k
    return {
        "alpha_us": max(alpha, 0.0),
        "beta_reduce_us": max(reduce_us, 0.0) / big,
        "beta_gather_us": max(gather_us, 0.0) / big,
        "gamma_us": flop_us / (4 * 256 * 256 * 256),
        "step_float_us": max(step_us, 0.0) / (2 * 256 * 64),
    }
