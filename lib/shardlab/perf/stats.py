"""One collective per dispatch: the K updates rebuilt from reduced sufficient statistics.

For the quadratic loss every quantity a step needs is a linear function of four sums
over the batch's valid rows, none of which depends on the weights:

    N = sum m,  A = sum m x x^T,  b = sum m x y,  c = sum m y^2
    loss numerator = w.A.w - 2 w.b + c,  gradient numerator = 2 (A w - b)

The sampler does not depend on the weights either, so a dispatch first draws its K
batches, each device sums (N, A, b, c) over its own slots of each batch, one `psum`
adds all K sets at once (with `symmetric_body`, only the upper triangle of
each A: d(d+1)/2 floats instead of d²), and every device then applies the K updates itself (replicated,
identical on every device). In real arithmetic this is the stage 2 update exactly; in
float32 the loss is a difference of large terms, so it agrees to a tolerance the tests
state, not bit for bit.

Why it is not general: it needs a loss whose batch sums factor into statistics of fixed
size that do not depend on the parameters (least squares does; a network's loss does
not), and it costs d x d numbers per step in the collective and d^2 work per row.
"""

import jax
import jax.numpy as jnp
import numpy as np

from shardlab.core.devices import AXIS
from shardlab.perf import device_sampler
from shardlab.perf.device_sampler import DeviceSampler
from shardlab.perf.steps import gather, update_scan


def sufficient(features, targets, mask):
    """(N, A, b, c) of one device's slots; padded rows are selected out, not multiplied."""
    valid = mask > 0
    x = jnp.where(valid[:, None], features, 0.0)
    y = jnp.where(valid, targets, 0.0)
    return jnp.sum(valid.astype(x.dtype)), x.T @ x, x.T @ y, y @ y


def packed_width(width: int) -> int:
    """Floats of one symmetric A in `fold`: h (2h + 1) with h = ceil(d / 2), i.e. d(d+1)/2 for even d."""
    half = -(-width // 2)
    return half * (2 * half + 1)


def fold(gram):
    """(K, d, d) symmetric -> (K, h(2h+1)): A's upper triangle, by block selects and no gather.

    With A = [[A11, A12], [A12^T, A22]] (h x h blocks, d padded to 2h), one (h+1) x h block
    holds A11's upper triangle in its first h rows and A22's lower triangle one row down.
    """
    k, width = gram.shape[0], gram.shape[1]
    half = -(-width // 2)
    gram = jnp.pad(gram, ((0, 0), (0, 2 * half - width), (0, 2 * half - width)))
    a11, a12, a22 = gram[:, :half, :half], gram[:, :half, half:], gram[:, half:, half:]
    row, col = np.arange(half + 1)[:, None], np.arange(half)[None, :]
    zero = jnp.zeros((k, 1, half), gram.dtype)
    both = jnp.where(col >= row, jnp.concatenate([a11, zero], 1), jnp.concatenate([zero, a22], 1))
    return jnp.concatenate([both.reshape(k, -1), a12.reshape(k, -1)], axis=1)


def unfold(flat, width: int):
    """The inverse of `fold`: (K, h(2h+1)) -> (K, d, d)."""
    k, half = flat.shape[0], -(-width // 2)
    both = flat[:, : (half + 1) * half].reshape(k, half + 1, half)
    a12 = flat[:, (half + 1) * half :].reshape(k, half, half)
    row, col = np.arange(half)[:, None], np.arange(half)[None, :]
    upper = jnp.where(col >= row, both[:, :half], 0.0)
    lower = jnp.where(col <= row, both[:, 1:], 0.0)
    a11 = upper + jnp.swapaxes(jnp.where(col > row, upper, 0.0), 1, 2)
    a22 = lower + jnp.swapaxes(jnp.where(col < row, lower, 0.0), 1, 2)
    top = jnp.concatenate([a11, a12], 2)
    bottom = jnp.concatenate([jnp.swapaxes(a12, 1, 2), a22], 2)
    return jnp.concatenate([top, bottom], 1)[:, :width, :width]


def pack(count, gram, cross, square, symmetric: bool = False):
    """K sets of statistics laid end to end, one row per step: [N, A, b (d), c].

    A is d*d floats, or with `symmetric` only its upper triangle (`fold`; A is a Gram matrix).
    """
    k = count.shape[0]
    flat = fold(gram) if symmetric else gram.reshape(k, -1)
    return jnp.concatenate([count[:, None], flat, cross, square[:, None]], axis=1)


def unpack(buffer, width: int, symmetric: bool = False):
    """(N, A, b, c), each with a leading axis of K, from a buffer made by `pack`."""
    k = buffer.shape[0]
    square_at = 1 + (packed_width(width) if symmetric else width * width)
    flat = buffer[:, 1:square_at]
    gram = unfold(flat, width) if symmetric else flat.reshape(k, width, width)
    return buffer[:, 0], gram, buffer[:, square_at : square_at + width], buffer[:, -1]


def sums_at(weights, count, gram, cross, square):
    """(count, gradient numerator, loss numerator), the stage 2 sums, from the statistics."""
    gram_w = gram @ weights
    return count, 2.0 * (gram_w - cross), weights @ gram_w - 2.0 * (weights @ cross) + square


def _statistics(features, targets, key, order, cursor, weights, momentum, active, symmetric, **static):
    batch_size, num_slots, k = static["batch_size"], static["slots"], static["k"]

    sampler, slots = device_sampler.plan(DeviceSampler(key, order, cursor), batch_size, num_slots, k, active)
    live = (jnp.arange(k) < active)[:, None]
    slots = device_sampler.Slots(slots.ids, jnp.where(live, slots.mask, 0.0))  # steps past `active` add nothing
    rows, values, mask = jax.vmap(lambda s: gather(features, targets, s, num_slots))(slots)
    local = pack(*jax.vmap(sufficient)(rows, values, mask), symmetric)
    stats = unpack(jax.lax.psum(local, AXIS), features.shape[1], symmetric)  # one all-reduce for all K steps
    (weights, momentum), losses = update_scan(sums_at, weights, momentum, active, stats, **static)
    return (*sampler, weights, momentum, losses, slots.ids)


def body(*args, **static):
    """Per-device program with the signature of `steps.per_step_body`: sample K, reduce once, update K."""
    return _statistics(*args, symmetric=False, **static)


def symmetric_body(*args, **static):
    """`body` with only the upper triangle of each Gram matrix in the collective."""
    return _statistics(*args, symmetric=True, **static)
