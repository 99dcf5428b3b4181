"""The per-device programs of the fused loop that reduce step by step, and the pieces every variant shares.

`gather` reads this device's block of a batch's slots (the block `P('data')` would place on it)
from its copy of the dataset; `update_scan` runs the K momentum updates every body shares, and
`keep_if` leaves its carry unchanged past the dispatch's `active` steps. `per_step_body` reduces
each step's local sums with one packed `psum`; `no_collective_body` is the same program with the
reduction removed (a bound with wrong numbers on several devices, the right update on one).
"""

import jax
import jax.numpy as jnp

from shardlab.core.devices import AXIS
from shardlab.core.update import apply_momentum, local_sums
from shardlab.perf import device_sampler
from shardlab.perf.device_sampler import DeviceSampler
from shardlab.perf.packed import packed_psum


def my_block(values, slots: int):
    """This device's block of a batch's slots: the entries `P('data')` would place here."""
    block = slots // jax.lax.axis_size(AXIS)
    return jax.lax.dynamic_slice_in_dim(values, jax.lax.axis_index(AXIS) * block, block)


def gather(features, targets, slots: device_sampler.Slots, num_slots: int):
    """(rows, targets, mask) of this device's slots; padded slots read row 0, and their mask is 0."""
    ids, mask = my_block(slots.ids, num_slots), my_block(slots.mask, num_slots)
    index = jnp.maximum(ids, 0)
    return features[index], targets[index], mask


def keep_if(active, new, old):
    """`new` where this step is active, else `old`, leaf by leaf."""
    return jax.tree.map(lambda a, b: jnp.where(active, a, b), new, old)


def local_only(count, grad_num, loss_num):
    """No collective: each device takes its own partial sums for the global ones (wrong numbers, a bound only)."""
    return count, grad_num, loss_num


def update_scan(sums_at, weights, momentum, active, per_step, **static):
    """((weights, momentum), K losses) of K updates in one `lax.scan`; step i sums `sums_at(weights, *per_step[i])`."""

    def one(carry, inputs):
        weights, momentum = carry
        index, *step = inputs
        sums = sums_at(weights, *step)
        new_w, new_v, loss, _ = apply_momentum(*sums, weights, momentum, static["learning_rate"], static["decay"])
        return keep_if(index < active, (new_w, new_v), (weights, momentum)), loss

    return jax.lax.scan(one, (weights, momentum), (jnp.arange(static["k"]), *per_step))


def _step_by_step(features, targets, key, order, cursor, weights, momentum, active, reduce, **static):
    batch_size, num_slots, k = static["batch_size"], static["slots"], static["k"]
    sampler, planned = device_sampler.plan(DeviceSampler(key, order, cursor), batch_size, num_slots, k, active)

    def sums_at(weights, slots):  # this device's sums of the step's slots, reduced across the devices
        return reduce(*local_sums(*gather(features, targets, slots, num_slots), weights))

    (weights, momentum), losses = update_scan(sums_at, weights, momentum, active, (planned,), **static)
    return (*sampler, weights, momentum, losses, planned.ids)


def per_step_body(*args, **static):
    """Per-device program: plan K batches, then per step local sums and one packed `psum`."""
    return _step_by_step(*args, reduce=packed_psum, **static)


def no_collective_body(*args, **static):
    """`per_step_body` with the `psum` removed: the data-parallel loop's time without its collective.

    Each device's weights then differ; the outputs are declared replicated anyway (device 0's
    are returned), so its program is compiled without shard_map's replication check.
    """
    return _step_by_step(*args, reduce=local_only, **static)


no_collective_body.check_vma = False
