"""Which wrong formula an observed loss, gradient or update follows, read from the numbers themselves.

Each function compares an observed value with the course's formula and with the formulas of known
mistakes (local means, local counts, padding counted, constant factors, per-device division, a fitted
momentum recursion) and says, in the course's language, which one it matches.
"""

import numpy as np

from shardlab.checker.common import matches
from shardlab.core.config import DECAY
from shardlab.verify import oracle


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
        0.5: "half: the 2 of d(r^2)/dw = 2 r x is missing"
        if quantity == "gradient"
        else "half: the 1/2-MSE convention; the course's L = sum m r^2 / N has no 1/2",
        2.0: "twice: a factor 2 too many",
        -1.0: "the negative: the residual's sign is flipped -> r = x.w - y (not y - x.w)",
        float(num_devices): f"{num_devices} times, the device count: each device's share was added without dividing "
        "once by the global N (a psum of local means)",
    }
    for value, text in named.items():
        if abs(c - value) < 1e-3 and (value != num_devices or num_devices > 2):
            return f"the {quantity} is {c:.3g} x the NumPy {quantity}: {text}"
    return f"the {quantity} is {c:.3g} x the NumPy {quantity}: a constant factor in the formula"


def empty_devices(mask, num_devices: int) -> list[int]:
    return [d for d, n in enumerate(oracle.device_counts(int(np.sum(np.asarray(mask) > 0)), num_devices)) if n == 0]


def nan_text(quantity: str, mask, num_devices: int) -> str:
    empty = empty_devices(mask, num_devices)
    if empty:
        return (
            f"the {quantity} is NaN on a batch where device(s) {empty} hold no valid row: a per-device division by "
            "that device's own zero count (0/0 = NaN, and 0 x NaN stays NaN) -> psum the numerators and counts "
            "first, then divide once by the global N"
        )
    return f"the {quantity} is not finite although every device holds a valid row: padding or overflow leaks in"


def explain_gradient(grad, features, targets, mask, weights, num_devices: int) -> str | None:
    """Which wrong formula `grad` follows, in the course's diagnostic language (None if none)."""
    parts = oracle.device_sums(features, targets, mask, weights, num_devices)
    local = oracle.local_means(parts)
    numerator = parts["grad_nums"].sum(axis=0)
    right = numerator / parts["counts"].sum()
    if not np.all(np.isfinite(np.asarray(grad, np.float64))):
        return nan_text("gradient", mask, num_devices)
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
    found = [text for value, text in candidates if matches(grad, value) and not matches(value, right)]
    if found:
        fix = " -> psum the count and both numerators over 'data', then divide once by the global N"
        return "; or ".join(found) + fix
    c = ratio(grad, right)
    return None if c is None else factor_text(c, "gradient", num_devices)


def explain_loss(loss, features, targets, mask, weights, num_devices: int, new_weights=None) -> str | None:
    """Which wrong formula the reported loss follows (None if none is recognised)."""
    count, _, loss_num = oracle.masked_sums(features, targets, mask, weights)
    right = loss_num / count
    if not np.isfinite(loss):
        return nan_text("loss", mask, num_devices)
    x, y, w = (np.asarray(a, np.float64) for a in (features, targets, weights))
    every_slot = float(np.sum((x @ w - y) ** 2))
    parts = oracle.device_sums(features, targets, mask, weights, num_devices)
    with np.errstate(invalid="ignore", divide="ignore"):
        local = parts["loss_nums"] / parts["counts"]
    candidates = [
        (every_slot / count, "the loss numerator includes the padded slots (its residuals were not masked)"),
        (loss_num / len(mask), "the loss numerator is divided by every slot: padding counted in the denominator"),
        (np.sqrt(right), "it is the square root of the course's loss (an RMSE); report the mean squared residual"),
        (local[np.isfinite(local)].mean(), "it is the mean of the per-device losses: averaging local means"),
    ]
    if new_weights is not None:
        after = oracle.masked_mean(features, targets, mask, new_weights)[0]
        candidates.append((after, "it equals the loss after the update -> report the loss before the update"))
    found = [text for value, text in candidates if matches(loss, value) and not matches(value, right)]
    if found:
        return "; or ".join(found)
    c = ratio(loss, right)
    text = None if c is None else factor_text(c, "loss", num_devices)
    return None if text is None or "a constant factor" in text else text


def fitted_update(previous: dict, grad, got: dict) -> str:
    """The update the outputs follow, v <- a*v + b*g and w <- w - lr*v, fitted from the observed numbers."""
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
        text = f"v <- {a:.3g}*v + {b:.3g}*g"
        for devices in (2, 4):
            if abs(a - devices * DECAY) < 1e-3:
                text += f" ({a:.3g} = {devices} devices x {DECAY}: the decay was applied on every device before a psum)"
    return f"{text}, w <- w - {lr:.3g}*v"
