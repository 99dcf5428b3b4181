"""Which wrong formula an observed loss, gradient or update follows, read from the numbers themselves.

Each function compares an observed value with the course's formula and with the formulas of known
mistakes (local means, local counts, padding counted, constant factors, per-device division, a fitted
momentum recursion) and says, in the course's language, every one it matches, most likely first. Over
several batches a mistake that one batch rules out is never named (`ranked`); a wrong update is blamed on
the recursion only when it does not follow the recursion on the gradient the step itself computed.
"""

from dataclasses import dataclass, field

import numpy as np

import shardlab.checker.causes as known_causes
from shardlab.checker.common import matches
from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.verify import oracle


def mark(*rule_ids: str, cause: str | None = None) -> str:
    """The marks naming the rules a diagnosed mistake breaks and the mistake itself (checker/causes.py): the runner
    moves them to the failure's rules line and its causes."""
    return "".join(f" {{rule:{rule_id}}}" for rule_id in rule_ids) + known_causes.mark(cause)


def cause_id(known: str) -> str:
    """The checker/causes.py id of a ranked formula (`Cause.id`, less any value after its colon)."""
    return known.split(":")[0].replace("_", "-")


def ratio(observed, right) -> float | None:
    """c if `observed` is c times `right` (least squares, within float32 noise), else None."""
    observed, right = np.asarray(observed, np.float64), np.asarray(right, np.float64)
    scale = float(np.sum(right * right))
    if not np.all(np.isfinite(observed)) or scale == 0.0:
        return None
    c = float(np.sum(observed * right) / scale)
    return c if np.allclose(observed, c * right, rtol=1e-4, atol=1e-6) else None


def factor_text(c: float, quantity: str, num_devices: int) -> str:
    """What a constant ratio to the NumPy value says about the formula."""
    named = {
        0.5: ("half: the 2 of d(r^2)/dw = 2 r x is missing", "missing-factor-two")
        if quantity == "gradient"
        else ("half: the 1/2-MSE convention; the course's L = sum m r^2 / N has no 1/2", "half-mse"),
        2.0: ("twice: a factor 2 too many", "factor-two"),
        -1.0: ("the negative: the residual's sign is flipped -> r = x.w - y (not y - x.w)", "residual-sign"),
        float(num_devices): (
            f"{num_devices} times, the device count: each device's share was added without dividing once by the "
            "global N (a psum of local means)",
            "local-sum",
        ),
    }
    for value, (text, cause) in named.items():
        if abs(c - value) < 1e-3 and (value != num_devices or num_devices > 2):
            return f"the {quantity} is {c:.3g} x the NumPy {quantity}: {text}" + mark("global-mean", cause=cause)
    return f"the {quantity} is {c:.3g} x the NumPy {quantity}: a constant factor in the formula" + mark(
        "global-mean", cause="constant-factor"
    )


# relative errors of float32 arithmetic against float64 NumPy stay near 1e-6; one rounding to float16 (11 significant
# bits) is up to 2^-11 ~ 4.9e-4 of the value, to bfloat16 (8 bits) 2^-8 ~ 3.9e-3
REDUCED_PRECISION = (2e-5, 3e-2)  # a relative error in this band, with no formula's factor, is reduced precision


def reduced_precision(observed, right, quantity: str) -> str | None:
    """The cause when `observed` is `right` rounded through a narrower float type: a relative error far above
    float32's and far below any formula's, with no constant factor (None otherwise)."""
    observed, right = np.asarray(observed, np.float64), np.asarray(right, np.float64)
    scale = float(np.linalg.norm(right))
    if observed.shape != right.shape or not np.all(np.isfinite(observed)) or scale == 0.0:
        return None
    relative = float(np.linalg.norm(observed - right)) / scale
    c = float(np.sum(observed * right)) / scale**2
    if not REDUCED_PRECISION[0] <= relative <= REDUCED_PRECISION[1] or abs(c - 1.0) > 1e-2:
        return None
    return (
        f"the {quantity} differs from the NumPy {quantity} by a relative {relative:.1e} (|{quantity}| / |NumPy "
        f"{quantity}| = {c:.6g}): no formula's factor, but rounding far above float32's (~1e-6 here), the size "
        "of a reduced-precision type: bfloat16 keeps 8 significant bits (~3.9e-3 per rounding), float16 11 (~4.9e-4) "
        "-> keep the features, weights and every product in float32 (no astype to bfloat16 or float16, no "
        "preferred_element_type or precision below float32)" + mark("global-mean", cause="reduced-precision")
    )


def empty_devices(mask, num_devices: int) -> list[int]:
    return [d for d, n in enumerate(oracle.device_counts(int(np.sum(np.asarray(mask) > 0)), num_devices)) if n == 0]


def nan_text(quantity: str, mask, num_devices: int) -> str:
    empty = empty_devices(mask, num_devices)
    if empty:
        return (
            f"the {quantity} is NaN on a batch where device(s) {empty} hold no valid row: a per-device division by "
            "that device's own zero count (0/0 = NaN, and 0 x NaN stays NaN) -> psum the numerators and counts "
            "first, then divide once by the global N" + mark("global-mean", cause="per-device-division")
        )
    return f"the {quantity} is not finite although every device holds a valid row: padding or overflow leaks in" + mark(
        "global-mean", "pad-by-position", cause="non-finite-leak"
    )


@dataclass(frozen=True)
class Cause:
    """One known mistake and the value it would produce on one batch (NumPy, float64)."""

    id: str
    text: str
    value: object
    variant_of: str | None = None  # a variant is named only where the evidence tells it from its parent
    rules: tuple = field(default=("global-mean",))  # the rules the mistake breaks (learner/rules.py ids)


# Every mistake a gradient or loss is compared with, most likely first: the ranking of causes that fit
# the same numbers (the mistakes learners make most often with shard_map and a mask come first).
PRIOR = (
    "local_means",
    "local_means_zero_when_empty",
    "padding_counted",
    "unmasked_residuals",
    "summed_twice",
    "local_sum",
    "local_count",
    "device_zero",
    "local_losses_of_non_empty_devices",
    "root_mean_square",
    "after_update",
)


def _rank(cause_id: str) -> int:
    return PRIOR.index(cause_id.split(":")[0]) if cause_id.split(":")[0] in PRIOR else len(PRIOR)


def _local_means_zero_when_empty(numerators, counts, each: str, means: str) -> Cause:
    """Each device's own mean with a guard (an empty device's `each` taken as 0), averaged over the devices: the
    one guarded-local-means mistake, for the gradient (`each` "mean") and for the loss (`each` "loss")."""
    counts = np.asarray(counts, np.float64).reshape((-1,) + (1,) * (np.ndim(numerators) - 1))
    guarded = np.where(counts > 0, numerators / np.maximum(counts, 1.0), 0.0)
    return Cause(
        "local_means_zero_when_empty",
        f"{means} with an empty device's {each} taken as 0: averaging local means (a guard against 0/0 does not "
        "make it the global mean)",
        guarded.mean(axis=0),
        variant_of="local_means",
    )


def gradient_causes(features, targets, mask, weights, num_devices: int) -> tuple[np.ndarray, list[Cause]]:
    """(the course's gradient, every known wrong gradient formula with its value on this batch)."""
    parts = oracle.device_sums(features, targets, mask, weights, num_devices)
    local = oracle.local_means(parts)
    numerator = parts["grad_nums"].sum(axis=0)
    right = numerator / parts["counts"].sum()
    causes = [
        Cause(
            "local_means",
            "it equals the mean of the per-device means: averaging local means weighs devices, not rows",
            local.mean(axis=0),
        ),
        Cause(
            "local_sum",
            "it equals the sum of the per-device means: the gradient grows with device count -> "
            "averaging local means with psum",
            local.sum(axis=0),
        ),
        Cause(
            "padding_counted",
            "it equals the summed numerator over every slot: padding counted as observations",
            numerator / len(mask),
        ),
        *[
            Cause(
                f"local_count:{c:g}",
                f"it equals the summed numerator over a device's own count ({c:g}): dividing by a local count",
                numerator / c,
            )
            for c in sorted(set(parts["counts"]) - {0})
        ],
        Cause(
            "device_zero",
            "it equals device 0's own mean: the numerators were never added across devices",
            parts["grad_nums"][0] / max(parts["counts"][0], 1),
        ),
    ]
    causes.append(
        _local_means_zero_when_empty(
            parts["grad_nums"], parts["counts"], "mean", "it equals the mean of the per-device means"
        )
    )
    return right, causes + summed_twice("gradient", right, num_devices)


def summed_twice(quantity: str, right, num_devices: int) -> list[Cause]:
    """The value of a sum over devices added over them once more (a psum of a psum): the device count times
    the right value on every batch, however the rows fall on the devices. None on one device, where it is right."""
    if num_devices < 2:
        return []
    such = ", such as the replicated weights' gradient, which jax.grad inside shard_map already adds over 'data'"
    return [
        Cause(
            "summed_twice",
            f"it is {num_devices} x the course's {quantity} on every batch, however the rows fall on the devices: "
            f"a sum over the {num_devices} devices was added over them again, a factor {num_devices} (a psum of a "
            f"value that is already the sum over 'data'{such if quantity == 'gradient' else ''}); add each "
            "over the devices once",
            num_devices * np.asarray(right, np.float64),
        )
    ]


def loss_causes(features, targets, mask, weights, num_devices: int, new_weights=None) -> tuple[float, list[Cause]]:
    """(the course's loss, every known wrong loss formula with its value on this batch)."""
    count, _, loss_num = oracle.masked_sums(features, targets, mask, weights)
    right = loss_num / count
    x, y, w = (np.asarray(a, np.float64) for a in (features, targets, weights))
    every_slot = float(np.sum((x @ w - y) ** 2))
    parts = oracle.device_sums(features, targets, mask, weights, num_devices)
    with np.errstate(invalid="ignore", divide="ignore"):
        local = parts["loss_nums"] / parts["counts"]
    causes = [
        Cause(
            "unmasked_residuals",
            "the loss numerator includes the padded slots (its residuals were not masked)",
            every_slot / count,
        ),
        Cause(
            "padding_counted",
            "the loss numerator is divided by every slot: padding counted in the denominator",
            loss_num / len(mask),
        ),
        Cause(
            "root_mean_square",
            "it is the square root of the course's loss (an RMSE); report the mean squared residual",
            np.sqrt(right),
        ),
        Cause("local_means", "it is the mean of the per-device losses: averaging local means", local.mean()),
    ]
    causes += [
        _local_means_zero_when_empty(
            parts["loss_nums"], parts["counts"], "loss", "it is the mean of the per-device losses"
        ),
        Cause(
            "local_losses_of_non_empty_devices",
            "it is the mean of the losses of the devices that hold a valid row: averaging local means",
            local[np.isfinite(local)].mean(),
            variant_of="local_means",
        ),
    ]
    if new_weights is not None:
        after = oracle.masked_mean(features, targets, mask, new_weights)[0]
        causes.append(
            Cause(
                "after_update",
                "it equals the loss after the update -> report the loss before the update",
                after,
                rules=("loss-before-update",),
            )
        )
    return right, causes + summed_twice("loss", right, num_devices)


def ranked(evidence: list[tuple]) -> list[Cause]:
    """Every cause that fits all the evidence, most likely first.

    `evidence` is a list of (observed, right, causes) over batches the same function computed. A cause is
    ruled out by any batch where it predicts a value the observed one does not match (one implementation has
    one formula). The survivors that fit at least one batch where the right value differs are ordered by how
    many batches confirm them, then by PRIOR. A variant (a guarded division) that gives its parent's value on
    every batch is the parent itself on this evidence and is not named twice.
    """
    ruled_out, confirmed, texts, values = set(), {}, {}, {}
    for observed, right, causes in evidence:
        for cause in causes:
            texts.setdefault(cause.id, cause)
            values.setdefault(cause.id, []).append(cause.value)
            if not matches(observed, cause.value):
                ruled_out.add(cause.id)
            elif not matches(cause.value, right):
                confirmed[cause.id] = confirmed.get(cause.id, 0) + 1
    alive = [i for i in confirmed if i not in ruled_out]

    def same_as_parent(i: str) -> bool:
        parent = texts[i].variant_of
        return parent in alive and all(matches(a, b) for a, b in zip(values[i], values[parent]))

    alive = [i for i in alive if not same_as_parent(i)]
    alive.sort(key=lambda i: (-confirmed[i], _rank(i)))
    return [Cause(i, texts[i].text, None, rules=texts[i].rules) for i in alive]


def listed(causes: list[Cause]) -> str:
    """The causes in words: one as it is; several numbered, most likely first; then the rules they break."""
    broken = mark(*dict.fromkeys(rule for c in causes for rule in c.rules))
    broken += "".join(mark(cause=cause_id(c.id)) for c in causes)
    if len(causes) == 1:
        return causes[0].text + broken
    return (
        f"the numbers fit {len(causes)} mistakes, most likely first: "
        + "; ".join(f"({n}) {c.text}" for n, c in enumerate(causes, 1))
        + broken
    )


GRADIENT_FIX = " -> psum the count and both numerators over 'data', then divide once by the global N"


def explain_gradient_over(observations: list[tuple], num_devices: int) -> str | None:
    """Why the gradients of several batches (grad, features, targets, mask, weights) are wrong, every fitting cause.

    The last observation is the batch being reported: its NaN explanation (if any) leads.
    """
    evidence = []
    for grad, *batch in observations:
        right, causes = gradient_causes(*batch, num_devices)
        evidence.append((np.asarray(grad, np.float64), right, causes))
    grad, *batch = observations[-1]
    found = ranked(evidence)
    lead = "" if np.all(np.isfinite(np.asarray(grad, np.float64))) else nan_text("gradient", batch[2], num_devices)
    if found:  # the NaN explanation already ends with the fix
        return f"{lead}; {listed(found)}" if lead else listed(found) + GRADIENT_FIX
    if lead:
        return lead
    clipped = clipped_text(evidence)
    if clipped:
        return clipped
    precision = reduced_precision(grad, evidence[-1][1], "gradient")
    if precision:
        return precision
    c = ratio(grad, evidence[-1][1])
    return None if c is None else factor_text(c, "gradient", num_devices)


CLIPPED = "a norm-clipped gradient"  # the name a clipped gradient's diagnosis carries (tests match it)
NORM_TOLERANCE = 1e-4  # relative: float32 rounding of a rescaled vector's norm stays near 1e-6


def _short(c: float) -> bool:
    """Whether `c` is written with at most two significant digits (1, 0.5, 2.5, 100): a threshold someone chose."""
    return c > 0 and abs(float(f"{c:.2g}") - c) <= NORM_TOLERANCE * c


def clip_norm(evidence: list[tuple]) -> float | None:
    """c if every observed gradient is the course's gradient g rescaled as g * min(1, c/|g|), else None.

    Each (observed, right, causes) is either right itself (|g| <= c) or right times a factor below 1 whose
    result has norm c, the same c on every batch. One rescaled batch alone fits any constant factor too: it is
    read as a clip only when c is a short number (a threshold someone wrote) and the factor is not (0.5 is the missing
    2 of d(r^2)/dw more likely than a clip); two or more batches rescaled to one norm need neither."""
    norms, unclipped, factors = [], [], []
    for observed, right, _ in evidence:
        observed, right = np.asarray(observed, np.float64), np.asarray(right, np.float64)
        if observed.shape != right.shape:
            return None
        if matches(observed, right):
            unclipped.append(float(np.linalg.norm(right)))
            continue
        c = ratio(observed, right)
        if c is None or not 0.0 < c < 1.0:
            return None
        norms.append(c * float(np.linalg.norm(right)))
        factors.append(c)
    if not norms:
        return None
    c = float(np.mean(norms))
    agree = all(abs(n - c) <= NORM_TOLERANCE * c for n in norms) and all(
        n <= c * (1 + NORM_TOLERANCE) for n in unclipped
    )
    return c if agree and (len(norms) > 1 or (_short(c) and not _short(factors[0]))) else None


def clipped_text(evidence: list[tuple]) -> str | None:
    """The diagnosis of a gradient clipped to norm c (`clip_norm`), said with the last batch's numbers."""
    c = clip_norm(evidence)
    if c is None:
        return None
    observed, right, _ = evidence[-1]
    size = float(np.linalg.norm(np.asarray(right, np.float64)))
    factor = float(np.linalg.norm(np.asarray(observed, np.float64))) / size if size else 1.0
    rescaled = sum(not matches(o, r) for o, r, _ in evidence)
    return (
        f"{CLIPPED}: the gradient is {factor:.3g} x the NumPy gradient, whose norm is {size:.6g}, so the gradient "
        f"returned has norm {c:.6g} = {factor:.3g} x {size:.6g}: it was rescaled as g * min(1, {c:.6g}/|g|) "
        f"({rescaled} of {len(evidence)} batch(es) rescaled to that same norm) -> the course's step neither clips "
        "nor rescales: return and apply the global masked mean of 2 x features^T x residual itself"
        + mark("global-mean", cause="clipped")
    )


def explain_gradient(grad, features, targets, mask, weights, num_devices: int) -> str | None:
    """Which wrong formulas `grad` follows on one batch, in the course's diagnostic language (None if none)."""
    return explain_gradient_over([(grad, features, targets, mask, weights)], num_devices)


def explain_loss_over(observations: list[tuple], num_devices: int) -> str | None:
    """Why the losses of several batches (loss, features, targets, mask, weights, new_weights) are wrong."""
    evidence = []
    for loss, *batch, new_weights in observations:
        right, causes = loss_causes(*batch, num_devices, new_weights=new_weights)
        evidence.append((float(loss), right, causes))
    loss, *batch, _ = observations[-1]
    if not np.isfinite(loss):
        return nan_text("loss", batch[2], num_devices)
    found = ranked(evidence)
    if found:
        return listed(found)
    precision = reduced_precision(loss, evidence[-1][1], "loss")
    if precision:
        return precision
    c = ratio(loss, evidence[-1][1])
    text = None if c is None else factor_text(c, "loss", num_devices)
    return None if text is None or "a constant factor" in text else text


def explain_loss(loss, features, targets, mask, weights, num_devices: int, new_weights=None) -> str | None:
    """Which wrong formulas the reported loss follows on one batch (None if none is recognised)."""
    return explain_loss_over([(loss, features, targets, mask, weights, new_weights)], num_devices)


def momentum_as_gradient(g_obs, momentum_out, grad_right, momentum_before) -> str | None:
    """The cause when the step's gradient output is its new momentum. Only from non-zero momentum: from zero
    momentum the new momentum is the gradient the step computed, right or wrong, and nothing tells them apart."""
    before = np.asarray(momentum_before, np.float64)
    if not before.any():
        return None
    if matches(g_obs, momentum_out) and not matches(momentum_out, grad_right):
        return (
            "the gradient output equals the new momentum (decay x momentum + gradient), not the gradient -> return "
            "(new weights, new momentum, loss, gradient), the gradient of this batch in the fourth place"
            + mark("global-mean", cause="momentum-as-gradient")
        )
    return None


def update_cause(
    previous: dict, grad_observed, grad_right, got: dict, learning_rate: float, decay: float, devices: int = 1
) -> str | None:
    """Whether a wrong update is the gradient's fault, the recursion's, or both (None if the gradient is right).

    Momentum and learning rate are judged on the gradient the step itself computed: when that gradient is
    already wrong but the update applies the course's recursion to it exactly, the recursion is not named.
    """
    g_obs = np.asarray(grad_observed, np.float64)
    if matches(g_obs, grad_right):
        return None
    swapped = momentum_as_gradient(g_obs, got["momentum"], grad_right, previous["momentum"])
    if swapped:
        return swapped
    v_prev, w_prev = (np.asarray(previous[k], np.float64) for k in ("momentum", "weights"))
    v_want = decay * v_prev + g_obs
    follows = matches(got["momentum"], v_want) and matches(got["weights"], w_prev - learning_rate * v_want)
    if follows:
        return (
            "the gradient is already wrong, and the update applies v <- decay*v + g, w <- w - learning_rate*v to "
            "that gradient exactly, so nothing here implicates momentum or the learning rate: fix the gradient "
            "(the global masked mean of 2 x features^T x residual)" + mark("global-mean", cause="gradient-only")
        )
    which = explain_update(previous, g_obs, got, learning_rate, decay, devices)
    return (
        "the gradient is already wrong, and the update does not follow v <- decay*v + g, w <- w - learning_rate*v "
        f"even on the gradient the step computed ({which}): fix the gradient first, then the update"
        + mark("global-mean", "momentum", cause="gradient-and-update")
    )


def _apart(value: float, course: float) -> str:
    """`value` with three significant digits, or, where it is further from the course's `course` than float32
    rounding and a fit's noise (a relative 1e-5), as many more (up to eight) as tell the two apart."""
    if abs(value - course) <= 1e-5 * abs(course):
        return f"{value:.3g}"
    for digits in range(3, 9):
        if f"{value:.{digits}g}" != f"{course:.{digits}g}":
            return f"{value:.{digits}g}"
    return f"{value:.3g}"


def fitted_update(previous: dict, grad, got: dict) -> str:
    """The update the outputs follow, v <- a*v + b*g and w <- w - lr*v, fitted from the observed numbers; each
    coefficient is printed with the digits that tell it from the course's (a learning rate of 0.0299988 is not 0.03)."""
    v_prev, w_prev = np.asarray(previous["momentum"], np.float64), np.asarray(previous["weights"], np.float64)
    v_new, w_new = np.asarray(got["momentum"], np.float64), np.asarray(got["weights"], np.float64)
    g = np.asarray(grad, np.float64)
    lr = float(np.dot(w_prev - w_new, v_new) / max(np.dot(v_new, v_new), 1e-30))
    if not np.any(v_prev):
        b = float(np.dot(v_new, g) / np.dot(g, g))
        text = f"v <- {b:.3g}*g from zero momentum"
        if abs(b - (1 - DECAY)) < 1e-3:
            text += f" (the averaging form v <- {DECAY}*v + {1 - DECAY:.1f}*g; the course adds the whole gradient)"
    else:
        (a, b), *_ = np.linalg.lstsq(np.stack([v_prev, g], axis=1), v_new, rcond=None)
        text = f"v <- {_apart(a, DECAY)}*v + {_apart(b, 1.0)}*g"
        for devices in (2, 4):
            if abs(a - devices * DECAY) < 1e-3:
                text += f" ({a:.3g} = {devices} devices x {DECAY}: the decay was applied on every device before a psum)"
    return f"{text}, w <- w - {_apart(lr, LEARNING_RATE)}*v"


def update_causes(previous: dict, grad, learning_rate: float, decay: float, devices: int) -> tuple:
    """(the course's new momentum and weights, every known wrong update with its value), each as one vector
    [momentum, weights], from the state before the step and the gradient the step computed; most likely first."""
    v, w = (np.asarray(previous[k], np.float64) for k in ("momentum", "weights"))
    g, lr, d = np.asarray(grad, np.float64), float(learning_rate), float(decay)
    right_v = d * v + g

    def both(momentum, weights):
        return np.concatenate([momentum, weights])

    rows = [
        (
            "course_learning_rate",
            f"w <- w - {LEARNING_RATE:g}*v: the course's default learning rate, not the learning_rate make_step was "
            f"given ({lr:.6g})",
            both(right_v, w - LEARNING_RATE * right_v),
        ),
        (
            "course_decay",
            f"v <- {DECAY:g}*v + g: the course's default decay, not the decay make_step was given ({d:.6g})",
            both(DECAY * v + g, w - lr * (DECAY * v + g)),
        ),
        (
            "learning_rate_in_momentum",
            "v <- decay*v + learning_rate*g, w <- w - v: the learning rate moved into the momentum (the same weights "
            "only while momentum is zero; the course's momentum adds the whole gradient)",
            both(d * v + lr * g, w - (d * v + lr * g)),
        ),
        (
            "averaged_momentum",
            "v <- decay*v + (1 - decay)*g: the averaging form; the course adds the whole gradient",
            both(d * v + (1 - d) * g, w - lr * (d * v + (1 - d) * g)),
        ),
        (
            "old_momentum",
            "w <- w - learning_rate*v with the momentum from before this step: update the momentum first, then the "
            "weights with the new momentum",
            both(right_v, w - lr * v),
        ),
        (
            "gradient_step",
            "w <- w - learning_rate*g: the weights take a plain gradient step and ignore the momentum",
            both(right_v, w - lr * g),
        ),
        *(
            [
                (
                    "decay_on_every_device",
                    f"v <- {devices}*decay*v + g: the decayed momentum was added on each of {devices} devices (inside "
                    "the psum); decay the replicated momentum once, outside the reduction",
                    both(devices * d * v + g, w - lr * (devices * d * v + g)),
                )
            ]
            if devices > 1
            else []
        ),
        ("momentum_dropped", "v <- g: the previous momentum is dropped (decay taken as 0)", both(g, w - lr * g)),
        (
            "nesterov",
            "w <- w - learning_rate*(g + decay*v): a Nesterov step; the course steps along the new momentum itself",
            both(right_v, w - lr * (g + d * right_v)),
        ),
        (
            "ascent",
            "w <- w + learning_rate*v: the step climbs the loss (the sign of the update)",
            both(right_v, w + lr * right_v),
        ),
        ("weights_kept", "the weights are returned unchanged (the new weights are never written)", both(right_v, w)),
        (
            "swapped",
            "v <- learning_rate*v + g, w <- w - decay*v: learning rate and decay swapped",
            both(lr * v + g, w - d * (lr * v + g)),
        ),
    ]
    right = both(right_v, w - lr * right_v)
    return right, [Cause(i, text, value, rules=("momentum",)) for i, text, value in rows]


def explain_update(previous: dict, grad, got: dict, learning_rate: float, decay: float, devices: int = 1) -> str:
    """Which update the new momentum and weights follow, on the gradient `grad`: every known mistake that fits,
    most likely first, and (where the numbers determine it) the recursion read off them.

    With fewer than three features and a non-zero momentum, v <- a*v + b*g cannot be read off (two unknowns per
    element at most two elements); no formula is then made up: only the known mistakes are compared."""
    right, causes = update_causes(previous, grad, learning_rate, decay, devices)
    observed = np.concatenate([np.asarray(got["momentum"], np.float64), np.asarray(got["weights"], np.float64)])
    found = ranked([(observed, right, causes)])
    v_prev = np.asarray(previous["momentum"], np.float64)
    determined = v_prev.size >= 3 or not np.any(v_prev)
    read = f"it follows {fitted_update(previous, grad, got)}" if determined else ""
    if found:
        return listed(found) + (f" ({read})" if read else "")
    return read or (
        "it follows none of the known update mistakes (too few features to read the recursion off the numbers)"
    )
