"""Stage 4's next optimisation: the learner's hypothesis, the change it names, and a judge that watches a control.

The learner reads the first trace and states a hypothesis as a small dict: one change from
`MENU` (changes this module can make and the notebook can gate bit for bit), the cut in
milliseconds of the median of the annotation that change should shorten, and why.
`stated` checks it and fills in what the trace says about it: the annotation's median, the
part of it the change can touch at most (`reach_ms`) and the **control**, the other
annotation, which the change should leave alone. `changed_loop` builds the change.

`judge` reads the trace taken after the change, the unchanged and the changed loop
alternating in one capture. The control's shift between the two sides is drift (the change
does not touch it), and half the widest middle half (25th to 75th percentile) of the four
sides is the samples' own spread; the larger of the two is the `noise` any cut is read
against. The reach is measured again on the unchanged side of that capture. The verdict is

- **inconclusive** if the cut exceeds everything the change can remove (`reach_ms`): the
  change alone cannot explain it, something else moved;
- **confirmed** if the cut minus the noise still reaches the threshold;
- **refuted** if the cut plus the noise stays below the threshold;
- **inconclusive** otherwise: the effect cannot be told from the drift at this sample size.

`RELATIONS` states the first three as `shardlab.course.claims` relations, so the sentence the
notebook prints is chosen by the same rule and re-checked against the recorded values.
"""

from functools import partial

import jax
import numpy as np

from shardlab.core.batch import next_batch as reference_next_batch
from shardlab.errors import UsageError
from shardlab.evidence.trace import PREPARE, UPDATE
from shardlab.perf.packed import make_packed_step


@partial(jax.jit, static_argnums=1)
def _split_and_permute(key, num_examples: int):
    key, subkey = jax.random.split(key)
    return key, jax.random.permutation(subkey, num_examples)


def one_call_draw(key, num_examples: int) -> tuple[np.ndarray, np.ndarray]:
    """`core.sampler.draw` (split, keep the first half, permute) as one jitted call and one copy back."""
    key, order = jax.device_get(_split_and_permute(np.asarray(key, np.uint32), num_examples))
    return np.asarray(key, np.uint32), np.asarray(order, np.int32)


# change -> what it does, the annotation it should shorten, the control it leaves alone, and the part of the
# target it can remove at most: columns of trace.breakdown, summed per transition (median over the traced
# transitions), or None for the whole annotation
MENU = {
    "one_call_reshuffle": {
        "what": "draw the key split and the permutation in one jitted call (same key, same order)",
        "target": PREPARE,
        "control": UPDATE,
        "reach": ("jitted_dispatch_ms", "other_ms"),  # the sampler's calls and the host work around them, not placement
    },
    "packed_psum": {
        "what": "reduce the count, loss and gradient numerators with one packed psum instead of three",
        "target": UPDATE,
        "control": PREPARE,
        "reach": None,
    },
}
# The verdict's rule over c (cut, ms), n (noise, ms), r (reach, ms) and t (threshold, ms); otherwise inconclusive.
RELATIONS = {
    "confirmed": "c <= r and c - n >= t",
    "refuted": "c <= r and c + n < t",
}


def _median(rows: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in rows]))


def reach_ms(change: str, transitions: list[dict], prepare_breakdown: list[dict]) -> float:
    """The most `change` could remove from its target's median: the part of the trace it touches."""
    entry = MENU[change]
    if entry["reach"] is None:
        return _median(transitions, f"{entry['target']}_ms")
    return float(np.median([sum(row[column] for column in entry["reach"]) for row in prepare_breakdown]))


def menu(transitions: list[dict], prepare_breakdown: list[dict]) -> list[dict]:
    """One row per change a hypothesis may name, with what this trace says it can remove at most."""
    return [
        {
            "change": name,
            "what it does": entry["what"],
            "shortens": entry["target"],
            "median ms": round(_median(transitions, f"{entry['target']}_ms"), 3),
            "can remove at most ms": round(reach_ms(name, transitions, prepare_breakdown), 3),
            "control": entry["control"],
        }
        for name, entry in MENU.items()
    ]


def stated(mine, transitions: list[dict], prepare_breakdown: list[dict]) -> dict:
    """The learner's hypothesis (`change`, `threshold_ms`, `because`) checked, with its annotation, control and reach.

    UsageError for anything else: a change not in MENU, a threshold that is not a positive number
    or that exceeds what the change can remove (refuted before it is tested), an empty reason.
    """
    if not isinstance(mine, dict) or set(mine) != {"change", "threshold_ms", "because"}:
        raise UsageError("a hypothesis is a dict with exactly the keys 'change', 'threshold_ms' and 'because'")
    change, threshold, because = mine["change"], mine["threshold_ms"], mine["because"]
    if change not in MENU:
        raise UsageError(f"no change named {change!r}; the notebook can make and gate {sorted(MENU)}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not np.isfinite(threshold):
        raise UsageError(f"threshold_ms must be a number of milliseconds, not {threshold!r}")
    reach = reach_ms(change, transitions, prepare_breakdown)
    if not 0 < threshold <= reach:
        raise UsageError(
            f"threshold_ms = {threshold} ms: a cut must be positive and at most the {reach:.3f} ms this trace says "
            f"{change} can remove"
        )
    if not isinstance(because, str) or not because.strip():
        raise UsageError("'because' should say what in the trace points at this change")
    entry = MENU[change]
    baseline = _median(transitions, f"{entry['target']}_ms")
    return {
        "change": change,
        "annotation": entry["target"],
        "control": entry["control"],
        "baseline_ms": baseline,
        "reach_ms": reach,
        "threshold_ms": float(threshold),
        "because": because.strip(),
        "text": (
            f"Change: {entry['what']}.\n"
            f"Hypothesis: the median traced {entry['target']} ({baseline:.3f} ms now) falls by at least "
            f"{float(threshold):.3f} ms, with identical ids, losses and weights; {entry['control']}, which the "
            "change does not touch, stays within its drift.\n"
            f"Because: {because.strip()}"
        ),
    }


def changed_loop(change: str, mesh, next_batch, make_step):
    """(next_batch, step) of the loop with `change` made; the half it does not touch stays the caller's."""
    if change == "one_call_reshuffle":
        return partial(reference_next_batch, reshuffle=one_call_draw), make_step(mesh)
    if change == "packed_psum":
        return next_batch, make_packed_step(mesh)
    raise UsageError(f"no change named {change!r}; the changes are {sorted(MENU)}")


def assert_same_run(changed: dict, unchanged: dict) -> None:
    """AssertionError unless the two states agree in all six fields, the sampler's in either form the course allows.

    At an epoch's end the reference `next_batch` leaves the cursor at the end and draws the next order
    when the next call needs it; a sampler may instead draw it at once (cursor 0, the next key and
    order). `drawn_at_once` turns the first form into the second, so both compare exactly.
    """
    from shardlab.verify.replay import drawn_at_once

    for field in ("weights", "momentum", "step"):
        np.testing.assert_array_equal(np.asarray(changed[field]), np.asarray(unchanged[field]), err_msg=field)
    changed, unchanged = drawn_at_once(changed), drawn_at_once(unchanged)
    for field in ("key", "order", "cursor"):
        np.testing.assert_array_equal(changed[field], unchanged[field], err_msg=field)


def verdict_rows(outcome: dict, reach_spread: tuple) -> list[dict]:
    """Every number the verdict reads, one row each, with the middle half where it is a median of samples."""
    sides, rows = outcome["sides"], []
    for role, part in (("annotation", sides["target"]), ("control", sides["control"])):
        for side in ("unchanged", "changed"):
            got = part[side]
            rows.append(
                {
                    "what the verdict reads": f"{outcome[role]} ({role}), {side} loop, median of {got['n']}",
                    "ms": round(got["median_ms"], 3),
                    "middle half ms": f"{got['q1_ms']:.3f}–{got['q3_ms']:.3f}",
                }
            )
    named = (
        ("your threshold (from the first trace)", "threshold_ms"),
        ("cut: the annotation's unchanged − changed median", "cut_ms"),
        ("drift: the control's unchanged − changed median", "control_drift_ms"),
        ("spread: half the widest middle half above", "spread_ms"),
        ("noise: the larger of |drift| and spread", "noise_ms"),
    )
    rows += [
        {"what the verdict reads": label, "ms": round(outcome[key], 3), "middle half ms": ""} for label, key in named
    ]
    low, high = reach_spread
    rows.append(
        {
            "what the verdict reads": "can remove at most, measured again on the unchanged side",
            "ms": round(outcome["reach_ms"], 3),
            "middle half ms": f"{low:.3f}–{high:.3f}",
        }
    )
    return rows


def reach_spread(change: str, transitions: list[dict], prepare_breakdown: list[dict]) -> tuple[float, float]:
    """The middle half (25th, 75th percentile) of what `change` can remove, per transition."""
    entry = MENU[change]
    if entry["reach"] is None:
        values = [r[f"{entry['target']}_ms"] for r in transitions]
    else:
        values = [sum(row[column] for column in entry["reach"]) for row in prepare_breakdown]
    low, high = np.percentile(values, [25, 75])
    return float(low), float(high)


def _side(values) -> dict:
    q1, median, q3 = (float(v) for v in np.percentile(values, [25, 50, 75]))
    return {"median_ms": median, "q1_ms": q1, "q3_ms": q3, "n": len(values)}


def judge(hypothesis: dict, unchanged: list[dict], changed: list[dict], reach: float | None = None) -> dict:
    """The verdict on `hypothesis` from annotation rows of both loops traced in one capture, the control in view.

    `reach` is the most the change can remove, measured on the unchanged side of the same capture
    (`reach_ms` of its rows and breakdown); without it, the first trace's value in the hypothesis.
    """
    from shardlab.course.claims import holds

    target, control = f"{hypothesis['annotation']}_ms", f"{hypothesis['control']}_ms"
    sides = {
        "target": {
            name: _side([r[target] for r in rows]) for name, rows in (("unchanged", unchanged), ("changed", changed))
        },
        "control": {
            name: _side([r[control] for r in rows]) for name, rows in (("unchanged", unchanged), ("changed", changed))
        },
    }
    cut = sides["target"]["unchanged"]["median_ms"] - sides["target"]["changed"]["median_ms"]
    drift = sides["control"]["unchanged"]["median_ms"] - sides["control"]["changed"]["median_ms"]
    spread = max((s["q3_ms"] - s["q1_ms"]) / 2 for part in sides.values() for s in part.values())
    reach = hypothesis["reach_ms"] if reach is None else float(reach)
    values = {"c": cut, "n": max(abs(drift), spread), "r": reach, "t": hypothesis["threshold_ms"]}
    verdict = next((name for name, relation in RELATIONS.items() if holds(relation, values)), "inconclusive")
    return {
        "annotation": hypothesis["annotation"],
        "control": hypothesis["control"],
        "sides": sides,
        "cut_ms": cut,
        "control_drift_ms": drift,
        "spread_ms": spread,
        "noise_ms": values["n"],
        "reach_ms": values["r"],
        "threshold_ms": values["t"],
        "verdict": verdict,
        "confirmed": verdict == "confirmed",
    }
