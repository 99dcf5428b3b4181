"""Stage 2 checks: `make_step` and `transition` against the NumPy formulas of the global masked mean.

With r_i = x_i.w - y_i and mask m_i: N = sum m_i, L = sum m_i r_i^2 / N, grad = 2 sum m_i x_i r_i / N,
then v <- decay*v + grad, w <- w - lr*v; the loss reported is the loss before the update.
When a gradient is wrong, `explain_gradient` names the wrong formula it follows instead.
"""

import jax
import ml_dtypes
import numpy as np
from jax.sharding import PartitionSpec as P

import shardlab.checker.formulas as formulas
import shardlab.checker.search as search
import shardlab.checker.wire as wire
from shardlab.checker.common import (
    CheckFailed,
    batch_arrays,
    cached_step,
    close,
    degenerate_data,
    expect,
    host,
    placed,
    replicas,
    see,
    sharding_of,
)
from shardlab.checker.domain import Case
from shardlab.checker.padding import check_padding
from shardlab.checker.properties import (
    KEEP_STEP_OUTPUTS,
    exact_data,
    host_outputs,
    mesh_of,
    misplaced_by,
    off_mesh,
    step_of,
)
from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.devices import make_mesh
from shardlab.core.update import count_all_reduce
from shardlab.verify import oracle

STAGE = 2
FULL, TAILS = 8, (7, 2, 1)  # 8 rows fill four devices; 7 -> [2,2,2,1], 2 -> [1,1,0,0], 1 -> [1,0,0,0]


def _ids(rows: int) -> np.ndarray:
    return np.random.default_rng(rows).permutation(23)[:rows]


def _weights(width: int) -> np.ndarray:
    return np.random.default_rng(5).normal(size=width).astype(np.float32)


def _inputs(ctx, rows: int, num_devices: int):
    """(host arrays, placed arguments): `rows` rows on the first `num_devices` devices, zero momentum."""
    width = ctx.data.features.shape[1]
    host = (*batch_arrays(ctx.data, _ids(rows), num_devices), _weights(width), np.zeros(width, np.float32))
    return host, placed(make_mesh(num_devices), *host)


def _observation(host, outputs, quantity: str) -> tuple:
    """What the formulas read from one batch: (observed, features, targets, mask, weights[, new weights])."""
    if quantity == "loss":
        return (float(np.asarray(outputs[2])), *host[:4], np.asarray(outputs[0]))
    return (np.asarray(outputs[3]), *host[:4])


def _verdict(ctx, host, outputs, quantity: str, num_devices: int, seen=()):
    """(ok, expected, observed, explanation) of one quantity ('loss' or 'grad') on one batch.

    `seen` holds observations of other batches the same step computed: a cause one of them rules out
    is not named, and every cause that fits them all is (formulas.ranked).
    """
    want = dict(zip(("loss", "grad"), oracle.masked_mean(*host[:4])))[quantity]
    observation = _observation(host, outputs, quantity)
    got = observation[0]
    if close(got, want):
        return True, want, got, ""
    observations = [*seen, observation]
    if quantity == "loss":
        why = formulas.explain_loss_over(observations, num_devices)
    else:
        why = formulas.explain_gradient_over(observations, num_devices)
    return False, want, got, why or f"no known wrong formula matches the {'loss' if quantity == 'loss' else 'gradient'}"


def _on_rows(ctx, rows: int, num_devices: int, quantity: str):
    host, args = _inputs(ctx, rows, num_devices)
    return _verdict(ctx, host, cached_step(ctx, num_devices)(*args), quantity, num_devices)


DENOMINATOR_WORDS = ("denominator", "count", "means", "padding counted", "per-device division")


def _tails(ctx, quantity: str):
    """Each tail batch judged with every batch of the check as evidence (full and tails, one step)."""
    step, devices, batches = cached_step(ctx), ctx.mesh.size, {}
    for rows in (FULL, *TAILS):
        host, args = _inputs(ctx, rows, devices)
        batches[rows] = (host, step(*args))
    full_ok = _verdict(ctx, *batches[FULL], quantity, devices)[0]
    every = [_observation(host, outputs, quantity) for host, outputs in batches.values()]
    for rows in TAILS:
        others = [o for r, o in zip(batches, every) if r != rows]
        ok, want, got, why = _verdict(ctx, *batches[rows], quantity, devices, seen=others)
        denominator = full_ok and any(word in why for word in DENOMINATOR_WORDS)
        pattern = "full batches pass but tails fail -> the denominator; " if denominator else ""
        expect(ok, want, got, f"{rows} row(s), {oracle.device_counts(rows, devices)} per device: {pattern}{why}")


def gradient_on_a_full_batch(ctx):
    """8 rows, 2 per device: the gradient equals the NumPy global mean.

    A wrong one is explained with the tail batches' gradients as evidence too: on an even split a psum of a
    gradient jax.grad already added over 'data', a sum of local means and a division by a device's own count all
    give the device count times the right value, and only batches that split the rows unevenly tell them apart."""
    devices, step = ctx.mesh.size, cached_step(ctx, ctx.mesh.size)
    host, args = _inputs(ctx, FULL, devices)
    outputs = step(*args)
    ok, want, got, why = _verdict(ctx, host, outputs, "grad", devices)
    if not ok:
        seen = [
            _observation(tail, step(*placed_tail), "grad")
            for tail, placed_tail in map(lambda rows: _inputs(ctx, rows, devices), TAILS)
        ]
        ok, want, got, why = _verdict(ctx, host, outputs, "grad", devices, seen=seen)
        why = f"{why} (the 7, 2 and 1 row batches' gradients taken as evidence too)"
    return expect(ok, want, got, f"8 rows, [2, 2, 2, 2] per device: {why}")


def gradient_on_tail_batches(ctx):
    """7, 2 and 1 rows (uneven and empty partitions): the gradient equals the NumPy global mean."""
    _tails(ctx, "grad")
    return "NumPy global-mean gradient for 7, 2 and 1 rows", "equal"


def loss_on_full_and_tail_batches(ctx):
    """8, 7, 2 and 1 rows: the reported loss equals the NumPy global masked mean, checked apart from the gradient."""
    ok, want, got, why = _on_rows(ctx, FULL, ctx.mesh.size, "loss")
    expect(ok, want, got, f"8 rows, [2, 2, 2, 2] per device: {why}")
    _tails(ctx, "loss")
    return "NumPy global masked-mean loss for 8, 7, 2 and 1 rows", "equal"


def _degenerate_inputs(ctx, ids):
    data, width = degenerate_data(ctx.data), ctx.data.features.shape[1]
    host = (*batch_arrays(data, np.asarray(ids), ctx.mesh.size), _weights(width), np.zeros(width, np.float32))
    return host, placed(ctx.mesh, *host)


EMPTY_DEVICE_IDS = {  # ids of degenerate rows first; every batch leaves the last device without a valid row
    "9 rows [3, 3, 3, 0]": [0, 1, 2, 3, 4, 5, 6, 7, 8],
    "5 rows [2, 2, 1, 0]": [0, 1, 3, 4, 5],
    "1 row [1, 0, 0, 0]": [3],
}
# The un-jitted step compiles one program per operation at every call (eager shard_map): its batch has the padded
# shape of stage 4's (7 rows and 5 rows both fill 8 slots on 4 devices), so a run of both compiles them once.
UNJITTED_BATCH = "5 rows [2, 2, 1, 0]"


def empty_device_contributes_zeros(ctx):
    """Batches whose last device has several padded slots and no valid row, on degenerate rows, in and out of jit.

    Loss and gradient must equal NumPy: the empty device adds exact zeros, never its own 0/0.
    """
    step = cached_step(ctx)
    for what, ids in EMPTY_DEVICE_IDS.items():
        host, args = _degenerate_inputs(ctx, ids)
        outputs = step(*args)
        for quantity in ("grad", "loss"):
            ok, want, got, why = _verdict(ctx, host, outputs, quantity, ctx.mesh.size)
            expect(ok, want, got, f"compiled step, {what} (zero, duplicate and large rows): {why}")
    what = UNJITTED_BATCH  # eight slots, as stage 4's un-jitted step gets: its per-operation programs are then read
    host, args = _degenerate_inputs(ctx, EMPTY_DEVICE_IDS[what])  # from the compilation cache, not compiled again
    outputs = ctx.impl.make_step(ctx.mesh, compiled=False)(*args)
    for quantity in ("grad", "loss"):
        ok, want, got, why = _verdict(ctx, host, outputs, quantity, ctx.mesh.size)
        expect(ok, want, got, f"un-jitted step (compiled=False), {what}: {why}")
    return "NumPy loss and gradient with an empty device, compiled and un-jitted", "equal"


def gradient_independent_of_device_count(ctx):
    """The same 7 rows on 1, 2 and 4 devices give the same (NumPy) gradient."""
    verdicts = {d: _on_rows(ctx, 7, d, "grad") for d in (1, 2, 4)}
    want = np.linalg.norm(verdicts[1][1])
    ratios = {d: float(np.linalg.norm(v[2]) / want) for d, v in verdicts.items()}
    wrong = [d for d, v in verdicts.items() if not v[0]]
    same = wrong and len({round(r, 4) for r in ratios.values()}) == 1
    if same and all(abs(r - 1.0) < 1e-2 for r in ratios.values()):
        trend = "is wrong by the same small amount on every device count, its size within 1% of NumPy's (no factor)"
    elif same:
        trend = "is off by the same factor on every device count (so it does not change with device count)"
    else:
        trend = "grows with device count" if ratios[1] < ratios[2] < ratios[4] else "changes with device count"
    why = verdicts[wrong[-1]][3] if wrong else ""
    return expect(
        not wrong,
        {d: 1.0 for d in verdicts},
        ratios,
        f"|gradient| / |NumPy gradient| per device count: the gradient {trend} (wrong on {wrong} device(s)); {why}"
        + formulas.mark(cause="grows-with-devices" if trend == "grows with device count" else None),
    )


LARGE_COUNT = 32_784  # valid rows on one device: float16 and bfloat16 round it (to 32,768), 16 and 8-bit integers wrap


def _count_rounded(count: int) -> dict:
    """Narrow type -> what it makes of `count` (a count summed in it, or cast to it)."""
    return {
        "float16": float(np.float16(count)),
        "bfloat16": float(ml_dtypes.bfloat16(count)),
        "int16": int(np.asarray(count).astype(np.int16)),
        "8-bit integers": int(np.asarray(count).astype(np.uint8)),
    }


def _exact_batch(rows: int, width: int):
    """Exact integer data (|x| <= 16, properties.exact_data), every row valid, zero momentum."""
    data, weights = exact_data(np.random.default_rng([rows, width]), rows, width, 16)
    return data.features, data.targets, np.ones(rows, np.float32), weights, np.zeros(width, np.float32)


def count_is_exact_on_a_large_batch(ctx):
    """32,784 valid rows on one device: loss and gradient equal NumPy's, divided by the count itself.

    Exact integer data leaves the division as the only rounding, so a count held in a narrow type (float16 or
    bfloat16 hold integers exactly only to 2,048 and 256; int16 wraps past 32,767) shows as a loss off by its ratio."""
    host = _exact_batch(LARGE_COUNT, ctx.data.features.shape[1])
    outputs = host_outputs(cached_step(ctx, 1)(*placed(make_mesh(1), *host)))
    want_loss, want_grad = oracle.masked_mean(*host[:4])
    got_loss, got_grad = outputs["loss"], outputs["grad"]
    ok = close(got_loss, want_loss) and close(got_grad, want_grad)
    used = LARGE_COUNT * want_loss / got_loss if got_loss else float("inf")
    named = [kind for kind, value in _count_rounded(LARGE_COUNT).items() if value and abs(used - value) < 0.5]
    cause = (
        f"the loss is the NumPy loss x {want_loss / got_loss:.6g}: a division by {used:,.1f}, not by the "
        f"{LARGE_COUNT:,} valid rows"
        + (f" ({' or '.join(named)} make {LARGE_COUNT:,} of that)" if named else "")
        + " -> count the valid rows in float32 (or int32) and divide by that count"
        + formulas.mark(cause="narrow-count")
        if got_loss and np.isfinite(used) and abs(used - LARGE_COUNT) >= 0.5
        else "no known cause"
    )
    expect(
        ok,
        {"loss": want_loss, "grad": want_grad},
        {"loss": got_loss, "grad": got_grad},
        f"{LARGE_COUNT:,} valid rows of exact integer data on one device: {cause}" + formulas.mark("global-mean"),
    )
    _exact_where_the_mean_is_exact(ctx)
    return (
        f"NumPy's loss and gradient on {LARGE_COUNT:,} rows; exactly NumPy's on "
        f"{len(EXACT_BATCHES) * EXACT_DRAWS + len(UNEVEN_BATCHES) * UNEVEN_DRAWS} batches of small integer data whose "
        "count is a power of two (on some, spread over the devices as counts that are not)",
        "equal",
    )


# (devices, slots, valid rows): counts that are powers of two, in 4 and 8 slots on the four devices (shapes the other
# checks of this stage compile) and 8 on one device (one compilation more: a loss numerator that rounds shows there),
# padding after. On small integer data every product and sum of the course's formula is an integer below 2^24 and the
# division by such a count only moves the binary point, so the global masked mean is a float32 number and every correct
# order of the course's operations (a psum of numerators, a pmean of shares, a product by 1/N) gives it exactly: any
# difference, however small, is a division by something other than the count or a numerator that rounds.
# One batch more has 41 slots a device (164 in all) and 32 valid rows, all on the first device: the count is a power of
# two but the slots are not, so a count made from the mask's mean times the slots (32 / 41 * 41) rounds in float32
# where a sum of the mask does not. The rule asks for exactness wherever the count is a power of two, whatever the
# slots.
EXACT_BATCHES = ((4, 4, 1), (4, 4, 2), (4, 4, 4), (4, 8, 8), (1, 8, 1), (1, 8, 2), (1, 8, 4), (1, 8, 8), (4, 164, 32))
EXACT_DRAWS = 2  # data drawn per batch: a rounding that happens to land on the exact value rarely does twice
# The rule's exactness is the global count's: a power of two in all (32 valid rows), spread over the four devices as
# 13, 13, 6 and 0 (13 slots each, padding after). A device's own count of 13 is no power of two, so a mean taken per
# device (its numerators divided by its count, then multiplied back or weighted by it) rounds where the course's
# order does not: x / 13 * 13 differs from x in float32 for about one integer in eleven, so each draw's 2 x 9 sums
# (8 gradient entries and the loss, on two devices) meet one about half the time, and 16 draws (one compilation, of
# the width UNEVEN_WIDTH) leave such a step unseen about once in 10^4. Every correct order is exact here too.
UNEVEN_BATCHES = ((4, 52, 32),)
UNEVEN_WIDTH, UNEVEN_DRAWS = 8, 16


def _exact_batch_of(rng, width: int, slots: int, rows: int):
    """(host features, targets, mask, weights): `rows` valid rows of small integer data, none with a zero residual,
    then padding up to `slots`."""
    features = rng.integers(-16, 17, size=(slots, width)).astype(np.float32)
    weights = rng.integers(-3, 4, size=width).astype(np.float32)
    offsets = rng.integers(1, 9, size=slots) * rng.choice([-1, 1], size=slots)  # no residual is zero
    targets = (features.astype(np.float64) @ weights + offsets).astype(np.float32)
    mask = (np.arange(slots) < rows).astype(np.float32)
    return features, targets, mask, weights


def _per_device(devices: int, slots: int, rows: int) -> list[int]:
    """Valid rows on each device of a batch of `rows` valid rows first in `slots` slots."""
    each = slots // devices
    return [min(max(rows - device * each, 0), each) for device in range(devices)]


def _uneven(devices: int, slots: int, rows: int) -> bool:
    """Whether some device holds a count of valid rows that is no power of two (nor zero)."""
    return any(count & (count - 1) for count in _per_device(devices, slots, rows))


def _exact_where_the_mean_is_exact(ctx) -> None:
    """Loss and gradient on EXACT_BATCHES of small integer data equal NumPy's exactly (no tolerance: nothing rounds);
    a division by the count plus an epsilon, or by a count made in a narrow type, is named with the divisor read off
    the outputs. Then UNEVEN_BATCHES, where the global count is a power of two but a device's own is not: a mean
    taken per device rounds there."""
    batches = [(*batch, ctx.data.features.shape[1], draw) for batch in EXACT_BATCHES for draw in range(EXACT_DRAWS)]
    batches += [(*batch, UNEVEN_WIDTH, draw) for batch in UNEVEN_BATCHES for draw in range(UNEVEN_DRAWS)]
    for devices, slots, rows, width, draw in batches:
        mesh = ctx.mesh if devices == ctx.mesh.size else make_mesh(devices)
        *host_batch, weights = _exact_batch_of(np.random.default_rng([slots, rows, width, draw]), width, slots, rows)
        count, grad_num, loss_num = oracle.masked_sums(*host_batch, weights)
        want = {"loss": loss_num / count, "grad": grad_num / count}
        step = cached_step(ctx, devices)
        outputs = host_outputs(step(*placed(mesh, *host_batch, weights, np.zeros(width, np.float32))))
        got = {"loss": float(outputs["loss"]), "grad": np.asarray(outputs["grad"], np.float64)}
        if got["loss"] == want["loss"] and np.array_equal(got["grad"], want["grad"]):
            continue
        divisor = loss_num / got["loss"] if got["loss"] else float("inf")
        grad_exact = np.array_equal(got["grad"], want["grad"])
        by_divisor = np.isfinite(divisor) and not grad_exact and close(got["grad"], grad_num / divisor)
        if _uneven(devices, slots, rows) and close(got["grad"], want["grad"]) and close(got["loss"], want["loss"]):
            why = (
                f"the devices hold {', '.join(map(str, _per_device(devices, slots, rows)))} of the valid rows, counts "
                "that are no power of two, and the outputs are off by a rounding: a mean was taken on each device "
                "(its numerators divided by its own count, then multiplied back by that count or weighted by it), and "
                "x / 13 * 13 is not x in float32 -> sum the raw numerators over the devices and divide once by the "
                "global count" + formulas.mark("global-mean", cause="local-means-reweighted")
            )
        elif by_divisor and divisor != count:
            why = (
                f"the outputs are the numerators divided by {divisor:.9g}, not by the count {count:g}: something was "
                "added to the count or it was rounded (an epsilon 'against division by zero': a batch holds at least "
                "one valid row, so the count is never 0; or a count made from the mask's mean times the slots, "
                "which rounds when the slots are no power of two) -> sum the mask over the devices and divide both "
                "numerators by that global count itself" + formulas.mark("global-mean", cause="count-offset")
            )
        elif grad_exact:
            why = (
                f"the gradient is exact but the loss is {got['loss']!r}, not {want['loss']!r}: the loss numerator "
                "itself rounds (a norm squared, a square root, a narrower type) -> sum the squared masked residuals"
                + formulas.mark("global-mean", cause="loss-numerator-rounds")
            )
        else:
            why = (
                "they differ from the global masked mean by more than nothing, where nothing rounds -> sum the masked "
                "numerators over the devices and divide once by the global count" + formulas.mark("global-mean")
            )
        expect(
            False,
            want,
            got,
            f"{rows} valid row(s) of small integer data (width {width}, draw {draw}) in {slots} slots on {devices} "
            "device(s): the global masked mean is a float32 number here (integer sums, a count that is a power of "
            "two), which "
            f"every correct order of the course's operations gives exactly; {why}",
        )


def replicas_agree(ctx):
    """Every device holds the same new weights and momentum, as NamedSharding(mesh, P())."""
    _, args = _inputs(ctx, 7, ctx.mesh.size)
    weights, momentum, _, _ = cached_step(ctx)(*args)
    for name, value in (("weights", weights), ("momentum", momentum)):
        wrong = sharding_of(value, ctx.mesh, P())
        expect(wrong is None, "NamedSharding(mesh, P())", wrong, f"the new {name} must stay replicated (P())")
        copies = replicas(value)
        spread = float(max(np.max(np.abs(c - copies[0])) for c in copies))
        expect(
            spread == 0.0,
            0.0,
            spread,
            f"the devices hold different {name} (largest difference shown) -> a device used a local quantity "
            "(its own count?) after the psum; every replica must see the same global sums",
        )
    return "identical replicas", "identical"


def _numpy_run(host_batches, width):
    weights, momentum, out = _weights(width).astype(np.float64), np.zeros(width), []
    for features, targets, mask in host_batches:
        new_w, momentum, loss, grad = oracle.momentum_step(features, targets, mask, weights, momentum)
        post_loss = oracle.masked_mean(features, targets, mask, new_w)[0]
        out.append({"weights": new_w, "momentum": momentum, "loss": loss, "grad": grad, "post_loss": post_loss})
        weights = new_w
    return out


def want_weights_before(expected: list, number: int, width: int) -> np.ndarray:
    """The NumPy weights update `number` (1-based) starts from."""
    return _weights(width) if number == 1 else expected[number - 2]["weights"]


def consecutive_updates(ctx):
    """Four updates in a row (8, 7, 1, 2 rows) from zero momentum match the NumPy momentum recursion."""
    width, mesh = ctx.data.features.shape[1], ctx.mesh
    host_batches = [batch_arrays(ctx.data, _ids(rows), mesh.size) for rows in (FULL, 7, 1, 2)]
    expected = _numpy_run(host_batches, width)
    step = cached_step(ctx)
    weights, momentum = _weights(width), np.zeros(width, np.float32)
    for number, (batch, want) in enumerate(zip(host_batches, expected), start=1):
        given = {"weights": np.asarray(weights), "momentum": np.asarray(momentum)}
        got = host_outputs(step(*placed(mesh, *batch, weights, momentum)))
        weights, momentum, loss, grad = (got[k] for k in ("weights", "momentum", "loss", "grad"))
        wrong = [k for k in got if not close(got[k], want[k])]
        if not wrong:
            continue
        if wrong == ["loss"] and close(loss, want["post_loss"]):
            why = "the loss equals the loss after the update -> report the loss before the update" + formulas.mark(
                "loss-before-update", cause="after-update"
            )
        elif wrong == ["loss"]:
            formula = formulas.explain_loss(loss, *batch, want_weights_before(expected, number, width), mesh.size)
            why = "only the reported loss differs (weights, momentum and gradient are right): " + (
                formula or "no known loss mistake fits its value" + see(ctx, "loss_on_full_and_tail_batches")
            )
        elif "grad" in wrong and (
            cause := formulas.update_cause(given, grad, want["grad"], got, LEARNING_RATE, DECAY, mesh.size)
        ):
            formula = formulas.explain_gradient(grad, *batch, given["weights"], mesh.size)
            why = cause + (f" ({formula})" if formula else "")
        else:
            previous = expected[number - 2] if number > 1 else {"weights": _weights(width), "momentum": np.zeros(width)}
            fitted = formulas.explain_update(previous, want["grad"], got, LEARNING_RATE, DECAY, mesh.size)
            head = (
                f"gradient right but update {number} diverges -> momentum or learning rate"
                if number > 1
                else ("gradient right but the first update is wrong")
            )
            why = (
                f"{head}: {fitted}; the course's is v <- {DECAY}*v + g, w <- w - "
                f"{LEARNING_RATE}*v on the global gradient, after the psum (or the weights were updated before the "
                "loss was taken)" + formulas.mark("momentum", cause="update-diverges")
            )
        expect(False, {k: want[k] for k in wrong}, {k: got[k] for k in wrong}, f"update {number}, {wrong}: {why}")
    _edge_hyperparameters(ctx)
    return (
        "4 NumPy momentum updates; a step made with learning rate 1e-30 and decay 1 - 2^-24 (a NumPy float32), "
        "one made with the ints 2 and 0",
        "equal",
    )


# The edges of what Config accepts, learning rate in (0, 10) and decay in [0, 1): a tiny learning rate, and the
# largest float32 decay below 1. One more step to build and compile.
EDGE = {"learning_rate": 1e-30, "decay": float(np.nextafter(np.float32(1), np.float32(0)))}


def _edge_hyperparameters(ctx) -> None:
    """A step made with EDGE's learning rate and decay uses them as given. From zero weights and momentum 1 on zero
    targets the gradient is exactly 0, so the new momentum is the decay and the new weights -learning_rate * decay,
    each one float32 product: the values the step used are read off its outputs (a floor or clamp "for stability"
    shows as another value)."""
    features = np.asarray(ctx.data.features[:FULL], np.float32)
    width = features.shape[1]
    zeros, ones = np.zeros(FULL, np.float32), np.ones(FULL, np.float32)
    step = _made_with_types_config_accepts(ctx)
    weights, momentum, _, _ = step(*placed(ctx.mesh, features, zeros, ones, np.zeros(width), np.ones(width)))
    v, w = np.asarray(momentum, np.float64), np.asarray(weights, np.float64)
    decay, rate = np.float32(EDGE["decay"]), np.float32(EDGE["learning_rate"])
    want_v, want_w = np.full(width, decay, np.float64), np.full(width, -(rate * decay), np.float64)
    right = np.allclose(v, want_v, rtol=2.0**-20, atol=0) and np.allclose(w, want_w, rtol=2.0**-20, atol=0)
    used_decay = float(v[0]) if v.size else float("nan")
    used_rate = -float(w[0]) / used_decay if v.size and used_decay else float("nan")
    expect(
        right,
        {"momentum": want_v, "weights": want_w},
        {"momentum": v, "weights": w},
        f"make_step(learning_rate={EDGE['learning_rate']:.3g}, decay={EDGE['decay']:.9g}), both inside what Config "
        f"accepts (learning rate in (0, 10), decay in [0, 1)), from zero weights, momentum 1 and a zero gradient: "
        f"the outputs follow decay {used_decay:.9g} and learning rate {used_rate:.3g} -> apply the learning rate and "
        "decay make_step was given as they are, with no floor, clamp or range of your own"
        + formulas.mark("momentum", cause="hyperparameters-altered"),
    )


def _made_with_types_config_accepts(ctx):
    """The edge step, made with its decay as a NumPy float32 (the same number), after a step made with the integers
    2 and 0 (built, not run: no compile): Config accepts an int and a NumPy scalar for learning rate and decay, so
    make_step must take them (rule:momentum). A refusal is named with the call and the type it refused."""
    calls = (
        {"learning_rate": 2, "decay": 0},
        {"learning_rate": EDGE["learning_rate"], "decay": np.float32(EDGE["decay"])},
    )
    for given in calls:
        try:
            step = ctx.impl.make_step(ctx.mesh, **given)
        except NotImplementedError:
            raise
        except Exception as exc:
            shown = ", ".join(f"{k}={v!r} ({type(v).__name__})" for k, v in given.items())
            expect(
                False,
                "a step",
                f"{type(exc).__name__}: {exc}"[:300],
                f"make_step(mesh, {shown}) raised {type(exc).__name__}, but Config accepts these values: a learning "
                "rate or decay may be a Python int or float or a NumPy scalar -> take any number Config accepts "
                "(float(value) reads each of them exactly), with no type test of your own"
                + formulas.mark("momentum", cause="hyperparameter-types-refused"),
            )
    return step


def loss_is_taken_before_the_update(ctx):
    """The reported loss is L(w) at the weights the gradient was taken at, not at the updated weights."""
    host, args = _inputs(ctx, 7, ctx.mesh.size)
    outputs = host_outputs(cached_step(ctx)(*args))
    new_weights, loss = outputs["weights"], outputs["loss"]
    before = oracle.masked_mean(*host[:4])[0]
    after = oracle.masked_mean(*host[:3], np.asarray(new_weights))[0]
    if close(loss, after):
        why = (
            "it equals the loss after the update -> the loss reported for a step is the loss before that step's "
            "update (weights updated before the loss was taken)"
            + formulas.mark("loss-before-update", cause="after-update")
        )
    else:
        formula = formulas.explain_loss(loss, *host[:4], ctx.mesh.size)
        why = "it is neither L(w) nor L(w_new): the loss formula itself is wrong" + (f" ({formula})" if formula else "")
    return expect(close(loss, before), before, loss, why)


def step_is_sharded(ctx):
    """The compiled step lowers to StableHLO with all_reduce operations (a real collective)."""
    _, args = _inputs(ctx, 7, ctx.mesh.size)
    step = cached_step(ctx)
    expect(hasattr(step, "lower"), "a jitted step (with .lower)", type(step).__name__, "make_step must return jax.jit")
    try:
        text = step.lower(*args).as_text()
    except Exception as exc:
        expect(False, "a step JAX can trace", wire.learner_error(exc), "a NumPy-only step cannot lower")
    found = count_all_reduce(text)
    return expect(
        found >= 1,
        ">= 1 all_reduce (the straightforward design has 3: count, gradient and loss numerators)",
        found,
        "no all_reduce in the lowered step -> the step is not sharded: wrap the body in jax.shard_map over 'data' "
        "and psum the count and numerators (a global jit hides the reduction from the lesson)"
        + formulas.mark(cause="not-sharded"),
    )


def _wrong_on_this_batch(ctx, batch, own, start) -> str:
    """Whose fault a wrong update on next_batch's batch is. The batch is judged first, against the rows its ids select
    (padding by position, data[ids]); the step is then judged on the very arrays it was given, by NumPy."""
    try:
        check_padding(batch, ctx.data, ctx.batch_size, ctx.mesh.size)
    except CheckFailed as wrong:
        given = [np.asarray(a) for a in (batch.features, batch.targets, batch.mask)]
        as_given = oracle.momentum_step(*given, *start)
        step_right = close(own["loss"], as_given[2]) and close(own["weights"], as_given[0])
        return (
            f"the batch next_batch gave is already wrong ({wrong.diagnosis})"
            + (
                "; the step is right on the arrays it was given, so the step is not at fault"
                if step_right
                else "; the step is wrong on the arrays it was given too"
            )
            + formulas.mark("pad-by-position")
            + see(ctx, "padding_is_never_an_observation", "padding_is_decided_by_position", "random_sampler_walk")
        )
    return "the step itself is wrong on this (correct) batch" + (
        see(ctx, *(c.__name__ for c in CHECKS if c.__name__.startswith(("gradient", "loss", "consecutive"))))
        or " -> fix the step first"
    )


def transition_is_one_batch_and_one_update(ctx):
    """Five transitions: step +1 each, the ids next_batch gives, and the NumPy update on those rows."""
    impl, mesh, width = ctx.impl, ctx.mesh, ctx.data.features.shape[1]
    step = cached_step(ctx)
    state = impl.initial(ctx.seed, ctx.data, mesh)
    weights, momentum = np.zeros(width), np.zeros(width)
    for number in range(1, 6):
        sampled, batch = impl.next_batch(state, ctx.data, ctx.batch_size, mesh)
        new, loss, ids = impl.transition(state, ctx.data, ctx.batch_size, step, mesh)
        counters = {"step": int(new["step"]), "cursor": int(new["cursor"])}
        wanted = {"step": int(state["step"]) + 1, "cursor": int(sampled["cursor"])}
        increment = counters["step"] - int(state["step"])
        if increment == len(batch.ids) != 1:
            why = f"step grew by {increment}, the number of ids -> step counts optimiser updates, not examples" + (
                formulas.mark(cause="step-counts-examples")
            )
        elif increment != 1:
            why = f"step grew by {increment} -> the transition increments step exactly once per update"
        elif counters["cursor"] != wanted["cursor"] or not np.array_equal(ids, batch.ids):
            why = "the ids or the cursor differ from next_batch's -> call next_batch once and use its batch"
        else:
            why = ""
        expect(
            not why,
            {**wanted, "ids": batch.ids},
            {**counters, "ids": ids},
            f"transition {number}: one transition = next_batch (the same ids and cursor) + one update "
            f"(step + 1 exactly once): {why}",
        )
        host = batch_arrays(ctx.data, ids, mesh.size)
        start = (np.asarray(state["weights"]), np.asarray(state["momentum"]))
        weights, momentum, want_loss, _ = oracle.momentum_step(*host, weights, momentum)
        if not (close(loss, want_loss) and close(new["weights"], weights)):
            own = host_outputs(step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"]))
            want = oracle.momentum_step(*host, *start)
            step_ok = close(own["loss"], want[2]) and close(own["weights"], want[0])
            why = (
                "the step is right on this batch, so the transition is not handing the state's weights and momentum "
                "to it or not keeping its outputs"
                if step_ok
                else _wrong_on_this_batch(ctx, batch, own, start)
            )
            expect(
                False,
                {"loss": want_loss, "weights": weights},
                {"loss": loss, "weights": np.asarray(new["weights"])},
                f"transition {number}: {why}",
            )
        _reports_the_steps_loss(ctx, number, step, batch, state, loss)
        state = new
    return "5 transitions: step 1..5, NumPy weights, the step's own loss", "equal"


def _reports_the_steps_loss(ctx, number: int, step, batch, state: dict, loss) -> None:
    """The loss a transition reports is the one the step it was given returns on that batch and state, to the bit
    (rule:one-update): the same compiled step on the same arrays gives the same float32, and float() of it is exact,
    so a rounding "for the records" shows on any loss, not only on one smaller than a tolerance."""
    try:
        own = host_outputs(step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"]))
    except RuntimeError:  # the transition donated the state's buffers: transition_leaves_its_input_intact says so
        return
    expect(
        float(loss) == own["loss"],
        f"the step's loss {own['loss']!r}",  # every digit: the report keeps eight of a number
        f"{float(loss)!r}",
        f"transition {number} reported the loss {float(loss)!r} where the step it was given returns {own['loss']!r} "
        "on the same batch and state -> report the step's loss as it returns it, float(loss), unrounded (a small "
        "loss rounded to a few decimals reads 0.0)" + formulas.mark("one-update", cause="loss-altered"),
    )


def transition_leaves_its_input_intact(ctx):
    """After a transition the caller's state is still readable and unchanged (no donated or reused buffers)."""
    state = ctx.impl.initial(ctx.seed, ctx.data, ctx.mesh)
    state, _, _ = ctx.impl.transition(state, ctx.data, ctx.batch_size, cached_step(ctx), ctx.mesh)
    before = {name: np.array(state[name], copy=True) for name in ("weights", "momentum", "cursor", "step")}
    ctx.impl.transition(state, ctx.data, ctx.batch_size, cached_step(ctx), ctx.mesh)
    for name, value in before.items():
        try:
            now = np.asarray(state[name])
        except RuntimeError as exc:
            expect(
                False,
                f"the input {name} readable",
                wire.learner_error(exc, 200),
                f"the input state's {name} was deleted by the step: its buffer was donated (donate_argnums) -> "
                "do not donate the weights or momentum; the caller may still hold the old state (to compare, "
                "retry or save it)" + formulas.mark(cause="donated-buffer"),
            )
        expect(
            np.array_equal(now, value),
            value,
            now,
            f"the transition changed the caller's {name} -> return a new state, never modify the input",
        )
    return "the input state readable and unchanged", "as expected"


def _host_ids(ids, where: str) -> str | None:
    """None if `ids` is a host NumPy integer array, else what it is instead."""
    if isinstance(ids, jax.Array) or not isinstance(ids, np.ndarray):
        return f"{where} is a {type(ids).__name__}, not a host NumPy array"
    if not np.issubdtype(ids.dtype, np.integer):
        return f"{where} has dtype {ids.dtype}, not an integer dtype"
    return None


def _device_ids(mesh) -> list[int]:
    return sorted(device.id for device in mesh.devices.flat)


def _first_update_on(ctx, mesh, step, found: list, initial_wrong: list, moved: list) -> list:
    """[the new weights] of one transition on `mesh` with `step`, or [] after adding what went wrong to the list of
    the function at fault: initial's state off the mesh, the step raising or leaving it, transition moving it."""
    where = f"the step made for the mesh of devices {_device_ids(mesh)}"
    state = ctx.impl.initial(ctx.seed, ctx.data, mesh)
    # the step's input first: a state initial placed elsewhere is initial's mistake, not the step's
    wrong = off_mesh({n: state[n] for n in ("weights", "momentum")}, mesh)
    if wrong:
        initial_wrong.append(
            f"initial's {list(wrong)} for the mesh of devices {_device_ids(mesh)} are not replicated on it "
            f"({next(iter(wrong.values()))})"
        )
        return []
    try:
        new, _, _ = ctx.impl.transition(state, ctx.data, ctx.batch_size, step, mesh)
    except NotImplementedError:
        raise
    except Exception as exc:
        found.append(f"{where} raised {type(exc).__name__} on that mesh's arrays: {str(exc)[:160]}")
        return []
    placed = new["weights"].devices() if isinstance(new["weights"], jax.Array) else set()
    if sorted(d.id for d in placed) != _device_ids(mesh):
        left = f"the weights on devices {sorted(d.id for d in placed)} ({type(new['weights']).__name__})"
        # the step on the same batch and state, called directly: whose outputs left the mesh
        _, batch = ctx.impl.next_batch(state, ctx.data, ctx.batch_size, mesh)
        if misplaced_by(step, batch, state, mesh):
            found.append(f"{where} left {left}")
        else:
            moved.append(f"transition on the mesh of devices {_device_ids(mesh)} returned {left}")
    return [host(new["weights"])]


def step_follows_the_mesh_it_was_made_for(ctx):
    """make_step called, in one process, for two meshes of the same size on other devices: each step runs one
    transition on its own mesh's arrays, leaves the weights there, and gives the numbers the other gives.

    A step kept between calls (memoised by the device count, a module-level step) is bound to the first mesh.
    """
    found, initial_wrong, moved = [], [], []
    for size in (1, 2):
        meshes = [mesh_of(ctx, size, layout) for layout in ("first", "last")]
        # both made before either runs; the search's cases of these meshes reuse them (one compilation each)
        steps = [step_of(ctx, Case(devices=size, layout=layout)) for layout in ("first", "last")]
        weights = []
        for mesh, step in zip(meshes, steps):
            weights += _first_update_on(ctx, mesh, step, found, initial_wrong, moved)
        if len(weights) == 2 and not np.allclose(weights[0], weights[1], rtol=1e-6, atol=1e-7):
            found.append(f"the same first update differs between the two {size}-device meshes")
    if initial_wrong:
        expect(
            False,
            "initial's state on the mesh it is given, then each step on its own mesh",
            initial_wrong + found,
            "the state initial returned is already wrong, before any step ran: "
            + "; ".join(initial_wrong)
            + " -> initial builds the state on the mesh each call is given (a state kept from an earlier call "
            "belongs to another mesh)"
            + (f"; the steps that could be judged: {'; '.join(found)}" if found else "; make_step is not judged here")
            + formulas.mark("replicated", "initial-fields"),
        )
    if moved:
        expect(
            False,
            "transition's new weights and momentum replicated on the mesh, as the step returns them",
            moved + found,
            "each step, called directly on the same batch and state, returns its new weights and momentum "
            "replicated on its own mesh, and transition does not keep them there: "
            + "; ".join(moved)
            + " -> "
            + KEEP_STEP_OUTPUTS
            + (f"; the steps found at fault as well: {'; '.join(found)}" if found else "; make_step is not at fault")
            + formulas.mark("one-update"),
        )
    return expect(
        not found,
        "each step runs on the mesh it was made for, with the same numbers",
        found,
        "make_step was called for two meshes of the same size on other devices, both steps made before either ran: "
        + "; ".join(found)
        + " -> build a new step from the mesh each call is given (a cache, if any, keyed by the mesh itself and "
        "every argument, never by its device count)" + formulas.mark("momentum"),
    )


def _host_float(loss) -> str | None:
    """None when `loss` is a Python float (np.float64 is one: a subclass), else what it is instead.

    A NumPy float32 or a 0-d array prints like a float but is not one: json.dumps refuses it.
    """
    if isinstance(loss, jax.Array):
        return f"the loss is a {type(loss).__name__} (a device array), not a host float" + formulas.mark(
            cause="loss-on-device"
        )
    if not isinstance(loss, float):
        return (
            f"the loss is a {type(loss).__module__}.{type(loss).__name__}, not a Python float (json.dumps refuses it)"
            + formulas.mark(cause="loss-not-python-float")
        )
    return None


def results_are_host_values(ctx):
    """transition's loss is a host float; its ids and the batch's ids are host NumPy integer arrays."""
    mesh, step = ctx.mesh, cached_step(ctx)
    state = ctx.impl.initial(ctx.seed, ctx.data, mesh)
    found = []
    for _ in range(2):
        _, batch = ctx.impl.next_batch(state, ctx.data, ctx.batch_size, mesh)
        state, loss, ids = ctx.impl.transition(state, ctx.data, ctx.batch_size, step, mesh)
        found += [_host_ids(getattr(batch, "ids", None), "the batch's ids"), _host_ids(ids, "transition's ids")]
        found.append(_host_float(loss))
    wrong = sorted({f for f in found if f})
    return expect(
        not wrong,
        "a host float loss and host NumPy integer ids",
        wrong,
        "the results a notebook prints and records must live on the host: "
        + "; ".join(wrong)
        + " -> float(loss) and np.asarray(ids) before returning them",
    )


CHECKS = (
    gradient_on_a_full_batch,
    gradient_on_tail_batches,
    loss_on_full_and_tail_batches,
    empty_device_contributes_zeros,
    gradient_independent_of_device_count,
    count_is_exact_on_a_large_batch,
    replicas_agree,
    consecutive_updates,
    loss_is_taken_before_the_update,
    step_is_sharded,
    transition_is_one_batch_and_one_update,
    transition_leaves_its_input_intact,
    results_are_host_values,
    step_follows_the_mesh_it_was_made_for,
    *search.checks_for(STAGE),
)
