"""Stage 2 checks: `make_step` and `transition` against the NumPy formulas of the global masked mean.

With r_i = x_i.w - y_i and mask m_i: N = sum m_i, L = sum m_i r_i^2 / N, grad = 2 sum m_i x_i r_i / N,
then v <- decay*v + grad, w <- w - lr*v; the loss reported is the loss before the update.
When a gradient is wrong, `explain_gradient` names the wrong formula it follows instead.
"""

import numpy as np
from jax.sharding import PartitionSpec as P

from shardlab.checker.common import (
    batch_arrays,
    cached_step,
    close,
    expect,
    matches,
    placed,
    replicas,
    sharding_of,
)
from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.devices import make_mesh
from shardlab.core.update import count_all_reduce
from shardlab.lessons import oracle

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


def _step_outputs(step, args) -> tuple:
    weights, momentum, loss, grad = step(*args)
    return weights, momentum, float(np.asarray(loss)), np.asarray(grad)


def explain_gradient(grad, features, targets, mask, weights, num_devices: int) -> str | None:
    """Which wrong formula `grad` follows, in the course's diagnostic language (None if none)."""
    parts = oracle.device_sums(features, targets, mask, weights, num_devices)
    local = oracle.local_means(parts)
    numerator = parts["grad_nums"].sum(axis=0)
    candidates = [
        (
            local.mean(axis=0),
            "it equals the mean of the per-device means: averaging local means weighs devices, not rows",
        ),
        (
            local.sum(axis=0),
            "it equals the sum of the per-device means: the gradient grows with device count -> "
            "averaging local means with psum",
        ),
        (numerator / len(mask), "it equals the summed numerator over every slot: padding counted as observations"),
        *[
            (
                numerator / c,
                f"it equals the summed numerator over a device's own count ({c:g}): dividing by a local count",
            )
            for c in sorted(set(parts["counts"]) - {0})
        ],
        (
            parts["grad_nums"][0] / max(parts["counts"][0], 1),
            "it equals device 0's own mean: the numerators were never added across devices",
        ),
    ]
    right = numerator / parts["counts"].sum()
    found = [text for value, text in candidates if matches(grad, value) and not matches(value, right)]
    if not found:
        return None
    return "; or ".join(found) + " -> psum the count and both numerators over 'data', then divide once by the global N"


def _gradient_verdict(ctx, rows: int, num_devices: int, quantities=("loss", "grad")):
    """(ok, expected, observed, explanation) of the step's loss and/or gradient on one batch."""
    host, args = _inputs(ctx, rows, num_devices)
    _, _, loss, grad = _step_outputs(cached_step(ctx, num_devices), args)
    want = dict(zip(("loss", "grad"), oracle.masked_mean(*host[:4])))
    got = {"loss": loss, "grad": grad}
    wrong = [q for q in quantities if not close(got[q], want[q])]
    if "grad" in wrong:
        why = explain_gradient(grad, *host[:4], num_devices) or "no known wrong formula matches the gradient"
    else:
        why = (
            "the gradient is right but the loss is not -> the loss numerator, psum'd and divided once by the "
            "global N, taken before the update (see loss_is_taken_before_the_update)"
        )
    return not wrong, {q: want[q] for q in quantities}, {q: got[q] for q in quantities}, why


def gradient_on_a_full_batch(ctx):
    """8 rows, 2 per device: loss and gradient equal the NumPy global mean."""
    ok, want, got, why = _gradient_verdict(ctx, FULL, ctx.mesh.size)
    return expect(ok, want, got, f"8 rows, [2, 2, 2, 2] per device: {why}")


def gradient_on_tail_batches(ctx):
    """7, 2 and 1 rows (uneven and empty partitions): loss and gradient equal the NumPy global mean."""
    full_ok = _gradient_verdict(ctx, FULL, ctx.mesh.size)[0]
    for rows in TAILS:
        ok, want, got, why = _gradient_verdict(ctx, rows, ctx.mesh.size)
        pattern = "full batches pass but tails fail -> the denominator; " if full_ok else ""
        expect(ok, want, got, f"{rows} row(s), {oracle.device_counts(rows, ctx.mesh.size)} per device: {pattern}{why}")
    return "NumPy global mean for 7, 2 and 1 rows", "equal"


def gradient_independent_of_device_count(ctx):
    """The same 7 rows on 1, 2 and 4 devices give the same (NumPy) gradient."""
    verdicts = {d: _gradient_verdict(ctx, 7, d, quantities=("grad",)) for d in (1, 2, 4)}
    want = np.linalg.norm(verdicts[1][1]["grad"])
    ratios = {d: float(np.linalg.norm(v[2]["grad"]) / want) for d, v in verdicts.items()}
    wrong = [d for d, v in verdicts.items() if not v[0]]
    trend = "grows" if ratios[1] < ratios[2] < ratios[4] else "changes"
    why = verdicts[wrong[-1]][3] if wrong else ""
    return expect(
        not wrong,
        {d: 1.0 for d in verdicts},
        ratios,
        f"|gradient| / |NumPy gradient| per device count: the gradient {trend} with device count "
        f"(wrong on {wrong} device(s)); {why}",
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


def consecutive_updates(ctx):
    """Four updates in a row (8, 7, 1, 2 rows) from zero momentum match the NumPy momentum recursion."""
    width, mesh = ctx.data.features.shape[1], ctx.mesh
    host_batches = [batch_arrays(ctx.data, _ids(rows), mesh.size) for rows in (FULL, 7, 1, 2)]
    expected = _numpy_run(host_batches, width)
    step = cached_step(ctx)
    weights, momentum = _weights(width), np.zeros(width, np.float32)
    for number, (batch, want) in enumerate(zip(host_batches, expected), start=1):
        weights, momentum, loss, grad = _step_outputs(step, placed(mesh, *batch, weights, momentum))
        got = {"weights": np.asarray(weights), "momentum": np.asarray(momentum), "loss": loss, "grad": grad}
        wrong = [k for k in got if not close(got[k], want[k])]
        if not wrong:
            continue
        if wrong == ["loss"] and close(loss, want["post_loss"]):
            why = "the loss equals the loss after the update -> report the loss before the update"
        elif "grad" not in wrong and number > 1:
            why = (
                f"gradient right but update {number} diverges -> momentum (v <- {DECAY}*v + g on the global "
                "gradient, after the psum), or weights updated before the loss was taken"
            )
        elif "grad" in wrong:
            why = "the gradient itself is wrong: see the gradient checks"
        else:
            why = f"gradient right but the first update is wrong -> w <- w - {LEARNING_RATE}*v with v <- {DECAY}*v + g"
        expect(False, {k: want[k] for k in wrong}, {k: got[k] for k in wrong}, f"update {number}, {wrong}: {why}")
    return "4 NumPy momentum updates", "equal"


def loss_is_taken_before_the_update(ctx):
    """The reported loss is L(w) at the weights the gradient was taken at, not at the updated weights."""
    host, args = _inputs(ctx, 7, ctx.mesh.size)
    new_weights, _, loss, _ = _step_outputs(cached_step(ctx), args)
    before = oracle.masked_mean(*host[:4])[0]
    after = oracle.masked_mean(*host[:3], np.asarray(new_weights))[0]
    why = "it equals the loss after the update" if close(loss, after) else "it is neither L(w) nor L(w_new)"
    return expect(
        close(loss, before),
        before,
        loss,
        f"{why} -> the loss reported for a step is the loss before that step's update (weights updated before "
        "the loss was taken)",
    )


def step_is_sharded(ctx):
    """The compiled step lowers to StableHLO with all_reduce operations (a real collective)."""
    _, args = _inputs(ctx, 7, ctx.mesh.size)
    step = cached_step(ctx)
    expect(hasattr(step, "lower"), "a jitted step (with .lower)", type(step).__name__, "make_step must return jax.jit")
    try:
        text = step.lower(*args).as_text()
    except Exception as exc:
        expect(False, "a step JAX can trace", f"{type(exc).__name__}: {exc}"[:300], "a NumPy-only step cannot lower")
    found = count_all_reduce(text)
    return expect(
        found >= 1,
        ">= 1 all_reduce (the straightforward design has 3: count, gradient and loss numerators)",
        found,
        "no all_reduce in the lowered step -> the step is not sharded: wrap the body in jax.shard_map over 'data' "
        "and psum the count and numerators (a global jit hides the reduction from the lesson)",
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
        expect(
            counters == wanted and np.array_equal(ids, batch.ids),
            {**wanted, "ids": batch.ids},
            {**counters, "ids": ids},
            f"transition {number}: one transition = next_batch (the same ids and cursor) + one update "
            "(step + 1 exactly once)",
        )
        host = batch_arrays(ctx.data, ids, mesh.size)
        weights, momentum, want_loss, _ = oracle.momentum_step(*host, weights, momentum)
        expect(
            close(loss, want_loss) and close(new["weights"], weights),
            {"loss": want_loss, "weights": weights},
            {"loss": loss, "weights": np.asarray(new["weights"])},
            f"transition {number}: if the step checks pass, transition must hand the state's weights and momentum "
            "to the step and keep its outputs; otherwise fix the step first",
        )
        state = new
    return "5 transitions: step 1..5, NumPy weights", "equal"


CHECKS = (
    gradient_on_a_full_batch,
    gradient_on_tail_batches,
    gradient_independent_of_device_count,
    replicas_agree,
    consecutive_updates,
    loss_is_taken_before_the_update,
    step_is_sharded,
    transition_is_one_batch_and_one_update,
)
