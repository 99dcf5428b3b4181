"""One collective per dispatch that moves inputs, not results: each device's slots for all K steps.

A device's rows and targets for a batch do not depend on the weights, and the sampler
does not either, so a dispatch can plan its K batches, let every device gather the rows
of its own block of slots for all K steps (the block `P('data')` would place on it, as
in `steps.per_step_body`), and exchange them in **one** `all_gather`: afterwards every
device holds every step's whole batch and computes every step's global sums itself,
replicated, with the stage 2 `local_sums` and `apply_momentum`. No device reads another
device's share of a batch except through that collective.

What moves is K x slots x (d + 1) floats (rows and targets; the mask follows from the
planned IDs, which every device already has), against K x (d^2 + d + 2) for the
statistics of `perf.stats` and K x (d + 2) in K separate collectives for the per-step
loop. It is small when the batch is small next to d, and it works for any loss: it
moves the data, not a loss-specific summary. Its price is D-fold repeated arithmetic
(every device updates with the whole batch) and, at large batches, a large buffer.
"""

import jax
import jax.numpy as jnp

from shardlab.core.devices import AXIS
from shardlab.core.update import apply_momentum, local_sums
from shardlab.perf import device_sampler
from shardlab.perf.device_sampler import DeviceSampler
from shardlab.perf.steps import gather, keep_if


def body(features, targets, key, order, cursor, weights, momentum, active, **static):
    """Per-device program with the signature of `steps.per_step_body`: sample K, gather inputs once, update K."""
    batch_size, num_slots, k = static["batch_size"], static["slots"], static["k"]
    sampler, slots = device_sampler.plan(DeviceSampler(key, order, cursor), batch_size, num_slots, k, active)
    rows, values, _ = jax.vmap(lambda s: gather(features, targets, s, num_slots))(slots)
    mine = jnp.concatenate([rows, values[..., None]], axis=-1)  # (K, my slots, d + 1)
    everyone = jax.lax.all_gather(mine, AXIS, axis=1, tiled=True, to="invarying")  # (K, slots, d + 1): one collective
    width = features.shape[1]

    def one(carry, inputs):
        weights, momentum = carry
        index, batch, mask = inputs
        sums = local_sums(batch[:, :width], batch[:, width], mask, weights)
        new_w, new_v, loss, _ = apply_momentum(*sums, weights, momentum, static["learning_rate"], static["decay"])
        return keep_if(index < active, (new_w, new_v), (weights, momentum)), loss

    (weights, momentum), losses = jax.lax.scan(one, (weights, momentum), (jnp.arange(k), everyone, slots.mask))
    return (*sampler, weights, momentum, losses, slots.ids)
