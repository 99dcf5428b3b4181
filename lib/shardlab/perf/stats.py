"""One collective per dispatch: the K updates rebuilt from reduced sufficient statistics.

For the quadratic loss every quantity a step needs is a linear function of four sums
over the batch's valid rows, none of which depends on the weights:

    N = sum m,  A = sum m x x^T,  b = sum m x y,  c = sum m y^2
    loss numerator = w.A.w - 2 w.b + c,  gradient numerator = 2 (A w - b)

The sampler does not depend on the weights either, so a dispatch first draws its K
batches, each device sums (N, A, b, c) over its own slots of each batch, one `psum`
adds all K sets at once, and every device then applies the K updates itself (replicated,
identical on every device). In real arithmetic this is the stage 2 update exactly; in
float32 the loss is a difference of large terms, so it agrees to a tolerance the tests
state, not bit for bit.

Why it is not general: it needs a loss whose batch sums factor into statistics of fixed
size that do not depend on the parameters (least squares does; a network's loss does
not), and it costs d x d numbers per step in the collective and d^2 work per row.
"""

import jax
import jax.numpy as jnp

from shardlab.core.devices import AXIS
from shardlab.core.update import apply_momentum
from shardlab.perf import device_sampler
from shardlab.perf.device_sampler import DeviceSampler
from shardlab.perf.fused import gather, keep_if


def sufficient(features, targets, mask):
    """(N, A, b, c) of one device's slots; padded rows are selected out, not multiplied."""
    valid = mask > 0
    x = jnp.where(valid[:, None], features, 0.0)
    y = jnp.where(valid, targets, 0.0)
    return jnp.sum(valid.astype(x.dtype)), x.T @ x, x.T @ y, y @ y


def pack(count, gram, cross, square):
    """K sets of statistics laid end to end, one row per step: [N, A (d*d), b (d), c]."""
    k = count.shape[0]
    return jnp.concatenate([count[:, None], gram.reshape(k, -1), cross, square[:, None]], axis=1)


def unpack(buffer, width: int):
    """(N, A, b, c), each with a leading axis of K, from a buffer made by `pack`."""
    k, square_at = buffer.shape[0], 1 + width * width
    gram = buffer[:, 1:square_at].reshape(k, width, width)
    return buffer[:, 0], gram, buffer[:, square_at : square_at + width], buffer[:, -1]


def sums_at(weights, count, gram, cross, square):
    """(count, gradient numerator, loss numerator), the stage 2 sums, from the statistics."""
    gram_w = gram @ weights
    return count, 2.0 * (gram_w - cross), weights @ gram_w - 2.0 * (weights @ cross) + square


def body(features, targets, key, order, cursor, weights, momentum, active, **static):
    """Per-device program with the signature of `fused._per_step_body`: sample K, reduce once, update K."""
    batch_size, num_slots, k = static["batch_size"], static["slots"], static["k"]

    sampler, slots = device_sampler.plan(DeviceSampler(key, order, cursor), batch_size, num_slots, k, active)
    live = (jnp.arange(k) < active)[:, None]
    slots = device_sampler.Slots(slots.ids, jnp.where(live, slots.mask, 0.0))  # steps past `active` add nothing
    rows, values, mask = jax.vmap(lambda s: gather(features, targets, s, num_slots))(slots)
    local = pack(*jax.vmap(sufficient)(rows, values, mask))
    stats = unpack(jax.lax.psum(local, AXIS), features.shape[1])  # one all-reduce for all K steps

    def one(carry, inputs):
        weights, momentum = carry
        index, *step_stats = inputs
        sums = sums_at(weights, *step_stats)
        new_w, new_v, loss, _ = apply_momentum(*sums, weights, momentum, static["learning_rate"], static["decay"])
        return keep_if(index < active, (new_w, new_v), (weights, momentum)), loss

    (weights, momentum), losses = jax.lax.scan(one, (weights, momentum), (jnp.arange(k), *stats))
    return (*sampler, weights, momentum, losses, slots.ids)
