"""Stage 4's next optimisation: the learner's hypothesis, the change it names, and a judge that watches a control.

The learner reads the first trace and states a hypothesis as a small dict: one change from
`MENU` (changes this module can make and the notebook can gate bit for bit), the cut in
milliseconds of the median of the annotation that change should shorten, and why. `stated`
checks it against an estimate of what the change can remove (`bounds`: for the one-call reshuffle
the course's draw, traced alone, which is all it replaces; for the packed psum the update's
time beyond the one-device update, where its all-reduces live; either way never more than the
median of the annotation it shortens, since a change cannot remove more than the whole of
what it targets, and `bounds` says which of the two it used) and names the **control**,
the other annotation, which the change should leave alone. `changed_loop` builds the change.

`judge` reads the trace taken after the change, the unchanged and the changed loop
alternating in one capture. The control's shift between the two sides is drift (the change
does not touch it), and half the widest middle half (25th to 75th percentile) of the four
sides is the samples' own spread; the larger of the two is the `noise` any cut is read
against. What the change can remove is measured again after that capture. The verdict is

- **confirmed** if the control drifted by no more than the threshold, the cut is within what
  the change can remove, and the cut minus the noise still reaches the threshold;
- **refuted** if the control drifted by no more than the threshold, and the cut plus the
  noise stays below it;
- **inconclusive** otherwise, for the first reason of `INCONCLUSIVE` that holds: the control
  moved by more than the effect predicted, the cut exceeds what the change can remove (the
  change alone cannot explain it), or the threshold lies within the cut ± the noise; and
  inconclusive about the cause (`cause_unshown`) when a target split into parts passes as a sum
  while the part the change's mechanism shortens did not fall by the threshold beyond the spread
  (`CAUSE_SHOWN`); but **refuted** (`mechanism_missed`) when that part fell short of the threshold
  by more than the noise (`CAUSE_MISSED`): the sum fell, the predicted mechanism did not remove it
  (`sum_verdict` keeps the sum's own verdict).

`RELATIONS` and `INCONCLUSIVE` are `shardlab.course.claims` relations, so the sentence the
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
def split_and_permute(key, num_examples: int):
    key, subkey = jax.random.split(key)
    return key, jax.random.permutation(subkey, num_examples)


def one_call_draw(key, num_examples: int) -> tuple[np.ndarray, np.ndarray]:
    """`core.sampler.draw` (split, keep the first half, permute) as one jitted call and one copy back."""
    key, order = jax.device_get(split_and_permute(np.asarray(key, np.uint32), num_examples))
    return np.asarray(key, np.uint32), np.asarray(order, np.int32)


# change -> what it does, the annotation it should shorten, the control it leaves alone, and the measured part
# of the target it replaces (what it can remove at most; `bounds` computes it):
MENU = {
    "one_call_reshuffle": {
        "what": "draw the key split and the permutation in one jitted call (same key, same order)",
        "target": PREPARE,
        "control": UPDATE,
        "reach": "the course's draw (split, then permute), traced alone: the change replaces it, nothing else",
        # where the draw lands in `trace.breakdown`: its dispatches and the host work around them, not placement;
        # the first part is the one its mechanism (fewer dispatches) shortens
        "parts": ("jitted_dispatch", "other"),
        "untouched": ("placement",),
    },
    "packed_psum": {
        "what": "reduce the count, loss and gradient numerators with one packed psum instead of three",
        "target": UPDATE,
        "control": PREPARE,
        "reach": "the update's median beyond the one-device compiled update's: what splitting adds, "
        "where the three all-reduces live",
        "parts": (),
        "untouched": (),
    },
}
# The verdict's rule over c (cut), n (noise), d (the control's drift), r (reach) and t (threshold), all ms;
# otherwise inconclusive, for the first reason of INCONCLUSIVE that holds.
RELATIONS = {
    "confirmed": "abs(d) <= t and t <= r and c <= r and c - n >= t",
    "refuted": "abs(d) <= t and t <= r and c <= r and c + n < t",
}
INCONCLUSIVE = {
    "drift_beyond_threshold": "abs(d) > t",
    "cut_beyond_reach": "c > r",
    "threshold_beyond_reach": "t > r",
    "threshold_within_noise": "c - n < t and t <= c + n",
}
# a target split into parts: the mechanism's part fell by the threshold (f), its changed middle half below the
# unchanged one's; a sum confirmed without this is inconclusive about the cause
CAUSE_SHOWN = "f >= t and mg_hi < mu_lo"
# the same part fell short of the threshold by more than the noise (n): the mechanism missed, whatever the sum did
CAUSE_MISSED = "f + n < t"


def quantities(change: str, rows: list[dict]) -> dict:
    """What the verdict on `change` reads in `rows`: the keys summed into its target and into its control, and labels.

    With `trace.breakdown`'s parts in the rows (`with_parts`), the target is the parts of the annotation the
    change touches and the control adds the parts it leaves alone to the other annotation; without them,
    the whole annotation and the other one.
    """
    if change not in MENU:
        raise UsageError(f"no change named {change!r}; the notebook can make and gate {sorted(MENU)}")
    entry = MENU[change]
    split = entry["parts"] and rows and all(f"{p}_ms" in rows[0] for p in entry["parts"] + entry["untouched"])
    if not split:
        return {
            "target_keys": [f"{entry['target']}_ms"],
            "control_keys": [f"{entry['control']}_ms"],
            "target": entry["target"],
            "control_label": entry["control"],
        }
    return {
        "target_keys": [f"{p}_ms" for p in entry["parts"]],
        "control_keys": [f"{entry['control']}_ms", *(f"{p}_ms" for p in entry["untouched"])],
        "target": f"{entry['target']}'s {' + '.join(entry['parts'])}",
        "control_label": f"{entry['control']} + {entry['target']}'s {' + '.join(entry['untouched'])}",
    }


def with_parts(rows: list[dict], parts: list[dict]) -> list[dict]:
    """Annotation rows with each transition's `trace.breakdown` parts beside them (the same transitions, in order)."""
    if len(rows) != len(parts):
        raise UsageError(f"{len(rows)} annotation rows but {len(parts)} breakdowns: not the same transitions")
    return [{**row, **{k: v for k, v in part.items() if k.endswith("_ms")}} for row, part in zip(rows, parts)]


def split_capture(capture: dict, breakdowns: list[dict]) -> dict:
    """Loop name -> {"rows": its transitions with their parts, "breakdown": its own breakdowns}, from one capture
    in which the loops alternate (`capture["order"]` names the loop of each transition, `breakdowns` in that order)."""
    if len(breakdowns) != len(capture["order"]):
        raise UsageError(f"{len(breakdowns)} breakdowns for {len(capture['order'])} transitions: not one capture")
    found = {}
    for loop, rows in capture["rows"].items():
        own = [part for part, who in zip(breakdowns, capture["order"]) if who == loop]
        found[loop] = {"rows": with_parts(rows, own), "breakdown": own}
    return found


def _summed(rows: list[dict], keys: list[str]) -> list[float]:
    return [float(sum(r[k] for k in keys)) for r in rows]


def _target_median(change: str, rows: list[dict]) -> float:
    return float(np.median(_summed(rows, quantities(change, rows)["target_keys"])))


def reach_samples(change: str, transitions: list[dict], draw_ms, one_device_ms: float) -> list[float]:
    """Per sample, the most `change` could remove: the course's draw traced alone, or the update beyond one device."""
    if change not in MENU:
        raise UsageError(f"no change named {change!r}; the notebook can make and gate {sorted(MENU)}")
    if change == "one_call_reshuffle":
        return [float(v) for v in draw_ms]
    return [max(0.0, r[f"{UPDATE}_ms"] - float(one_device_ms)) for r in transitions]


def bounded(measured_ms: float, annotation_ms: float) -> dict:
    """The smaller of what was measured and the target annotation's median, and which of the two it is."""
    measured_ms, annotation_ms = float(measured_ms), float(annotation_ms)
    if measured_ms <= annotation_ms:
        return {"ms": measured_ms, "bound": "measured", "measured_ms": measured_ms, "annotation_ms": annotation_ms}
    return {"ms": annotation_ms, "bound": "annotation", "measured_ms": measured_ms, "annotation_ms": annotation_ms}


def bounds(transitions: list[dict], draw_ms, one_device_ms: float) -> dict:
    """change -> `bounded`: the median of `reach_samples`, capped by the median of the annotation the change targets."""
    return {
        name: bounded(
            np.median(reach_samples(name, transitions, draw_ms, one_device_ms)),
            _target_median(name, transitions),
        )
        for name in MENU
    }


def menu(transitions: list[dict], reach: dict | None = None) -> list[dict]:
    """One row per change a hypothesis may name: what it shortens, its median, the control, and (given `reach`,
    change -> the "ms" of its `bounds`) what it can remove at most."""
    rows = []
    for name, entry in MENU.items():
        median, read = _target_median(name, transitions), quantities(name, transitions)
        row = {"change": name, "what it does": entry["what"], "shortens": read["target"], "median ms": round(median, 3)}
        if reach is not None:
            row["estimated reach ms"] = round(min(reach[name], median), 3)
        rows.append({**row, "control": read["control_label"]})
    return rows


def stated(mine, transitions: list[dict], reach: dict, whose: str = "your hypothesis") -> dict:
    """The learner's hypothesis (`change`, `threshold_ms`, `because`) checked, with its annotation, control and reach.

    UsageError for anything else: a change not in MENU, a threshold that is not a positive number
    or that exceeds what the change can remove or the median of the annotation it shortens (a cut the
    target cannot reach, refuted before it is tested), an empty reason.
    """
    if not isinstance(mine, dict) or set(mine) != {"change", "threshold_ms", "because"}:
        raise UsageError("a hypothesis is a dict with exactly the keys 'change', 'threshold_ms' and 'because'")
    change, threshold, because = mine["change"], mine["threshold_ms"], mine["because"]
    if change not in MENU:
        raise UsageError(f"no change named {change!r}; the notebook can make and gate {sorted(MENU)}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not np.isfinite(threshold):
        raise UsageError(f"threshold_ms must be a number of milliseconds, not {threshold!r}")
    entry, read = MENU[change], quantities(change, transitions)
    baseline = _target_median(change, transitions)
    if not 0 < threshold:
        raise UsageError(f"threshold_ms = {threshold} ms: a predicted cut must be more than 0 ms")
    if threshold > baseline:
        raise UsageError(
            f"threshold_ms = {threshold} ms is more than the whole of {read['target']} ({baseline:.3f} ms by median "
            f"in this trace): {change} cannot remove more than the annotation it shortens; predict a smaller cut"
        )
    reach = min(float(reach[change]), baseline)
    if threshold > reach:
        raise UsageError(
            f"threshold_ms = {threshold} ms: at most the {reach:.3f} ms this trace says {change} can remove"
        )
    if not isinstance(because, str) or not because.strip():
        raise UsageError("'because' should say what in the trace points at this change")
    return {
        "change": change,
        "annotation": entry["target"],
        "control": entry["control"],
        **read,
        "baseline_ms": baseline,
        "control_baseline_ms": float(np.median(_summed(transitions, read["control_keys"]))),
        "reach_ms": reach,
        "threshold_ms": float(threshold),
        "because": because.strip(),
        "whose": whose,
        "text": (
            f"{whose[0].upper() + whose[1:]}. Change: {entry['what']}.\n"
            f"Hypothesis: the median traced {read['target']} ({baseline:.3f} ms now) falls by at least "
            f"{float(threshold):.3f} ms, with identical ids, losses and weights; {read['control_label']}, which the "
            "change does not touch, stays within its drift.\n"
            f"Because: {because.strip()}"
        ),
    }


WORKED = "the worked example"  # while the hypothesis cell is empty; the page folds it until the learner writes theirs


def whose(mine) -> tuple[str, str]:
    """Whose hypothesis and verdict the page shows: the learner's, or the worked example's while `mine` is None."""
    if mine is not None:
        return "your hypothesis", "Your verdict"
    return WORKED, "The worked example's verdict (not yours)"


def worked_example(breakdown: list[dict], reach: dict) -> dict:
    """The hypothesis run while the learner's is None: one call removes at least half the draw's dispatches.

    Half the median `jitted_dispatch_ms` of the first trace's `breakdown`, or half the one-call
    reshuffle's `reach` (change -> ms) when that is smaller, so the example never predicts more than
    the change can remove. Its reason counts the jitted calls of the first transition (`dispatched`).
    """
    dispatch = float(np.median([row["jitted_dispatch_ms"] for row in breakdown]))
    limit = float(reach["one_call_reshuffle"])
    threshold = 0.5 * min(dispatch, limit)
    of = "the estimated reach" if limit < dispatch else "the dispatches"
    calls = len(breakdown[0]["dispatched"])
    because = (
        f"jitted_dispatch takes {dispatch:.3f} ms by median in the first trace (reach {limit:.3f} ms), over "
        f"{calls} jitted call{'s' * (calls != 1)} per transition, each dispatched on its own; one call should remove "
        f"at least half of {of}, {threshold:.3f} ms"
    )
    return {"change": "one_call_reshuffle", "threshold_ms": threshold, "because": because}


def parts_table(keys: list[str], captures: dict, summed: bool = True) -> list[dict]:
    """Per capture (name -> transition rows), each of `keys` and (for several, unless not `summed`) their
    per-transition sum, as "median (middle half)" in ms; the sum's median is taken over the sums, not added from
    the parts' medians."""

    def median_and_half(values):
        q1, median, q3 = np.percentile(values, [25, 50, 75])
        return f"{median:.3f} ({q1:.3f}–{q3:.3f})"

    table = []
    for name, rows in captures.items():
        row = {"medians, ms (middle half)": name, **{k[:-3]: median_and_half([r[k] for r in rows]) for k in keys}}
        if summed and len(keys) > 1:
            row["their sum"] = median_and_half(_summed(rows, keys))
        table.append(row)
    return table


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


def verdict_rows(outcome: dict) -> list[dict]:
    """What the verdict reads, in four rows: the target and the control, each loop's median with its middle half
    and their difference (the cut, the drift); the threshold, margin, spread and noise; the reach."""

    def median_and_half(got):
        return f"{got['median_ms']:.3f} ({got['q1_ms']:.3f}–{got['q3_ms']:.3f})"

    sides, rows = outcome["sides"], []
    labels = {"target": outcome.get("target", outcome["annotation"]), "control": outcome.get("control_label")}
    for role, fall, key in (("target", "cut", "cut_ms"), ("control", "drift", "control_drift_ms")):
        rows.append(
            {
                "medians, ms (middle half)": f"{role}: {labels[role] or outcome[role]}",
                "unchanged loop": median_and_half(sides[role]["unchanged"]),
                "changed loop": median_and_half(sides[role]["changed"]),
                "unchanged − changed": f"{fall} {outcome[key]:.3f}",
            }
        )
    rows.append(
        {
            "medians, ms (middle half)": "noise: the larger of |drift| and the spread (half the widest middle half); "
            "margin: cut − threshold",
            "unchanged loop": "",
            "changed loop": "",
            "unchanged − changed": f"threshold {outcome['threshold_ms']:.3f}, margin {outcome['margin_ms']:.3f}, "
            f"spread {outcome['spread_ms']:.3f}, noise {outcome['noise_ms']:.3f}",
        }
    )
    reach, capped = outcome["reach"], outcome.get("reach_bound") == "annotation"
    held = {"median_ms": outcome["reach_ms"], **outcome["reach_range"]}
    measured = median_and_half(reach)  # capped: more than the target's unchanged median, which is held instead
    if capped:
        measured = f"{median_and_half(held)}, the target's unchanged median (capped; measured {measured})"
    rows.append(
        {
            "medians, ms (middle half)": f"estimated reach: what the change can remove, measured again ({reach['n']})",
            "unchanged loop": "",
            "changed loop": "",
            "unchanged − changed": f"at most {measured}",
        }
    )
    return rows


def _side(values) -> dict:
    q1, median, q3 = (float(v) for v in np.percentile(values, [25, 50, 75]))
    return {"median_ms": median, "q1_ms": q1, "q3_ms": q3, "n": len(values)}


def judge(hypothesis: dict, unchanged: list[dict], changed: list[dict], reach_samples_ms) -> dict:
    """The verdict on `hypothesis` from annotation rows of both loops traced in one capture, the control in view.

    `reach_samples_ms` are the samples of what the change can remove at most, measured again after
    the capture (`reach_samples`); their median, capped by the unchanged annotation's median in
    this capture (`bounded`), bounds the cut. `reach_range` is the middle half of whichever samples
    gave that bound. The first trace's median of the annotation
    (`hypothesis["baseline_ms"]`, where given) is kept beside this capture's, to show whether the
    baseline moved between the captures.
    """
    from shardlab.course.claims import holds

    target = hypothesis.get("target_keys") or [f"{hypothesis['annotation']}_ms"]
    control = hypothesis.get("control_keys") or [f"{hypothesis['control']}_ms"]
    sides = {
        role: {name: _side(_summed(rows, keys)) for name, rows in (("unchanged", unchanged), ("changed", changed))}
        for role, keys in (("target", target), ("control", control))
    }
    cut = sides["target"]["unchanged"]["median_ms"] - sides["target"]["changed"]["median_ms"]
    drift = sides["control"]["unchanged"]["median_ms"] - sides["control"]["changed"]["median_ms"]
    spread = max((s["q3_ms"] - s["q1_ms"]) / 2 for part in sides.values() for s in part.values())
    reach = _side(list(reach_samples_ms))
    capped = bounded(reach["median_ms"], sides["target"]["unchanged"]["median_ms"])
    # the middle half of the samples whose median is the reach: the re-measured ones, or the target's when capped
    held = reach if capped["bound"] == "measured" else sides["target"]["unchanged"]
    reach_range = {"q1_ms": held["q1_ms"], "q3_ms": held["q3_ms"]}
    values = {"c": cut, "n": max(abs(drift), spread), "d": drift, "r": capped["ms"]}
    values["t"] = hypothesis["threshold_ms"]
    verdict = next((name for name, relation in RELATIONS.items() if holds(relation, values)), "inconclusive")
    parts = {}  # where the target splits into parts: each part's fall, unchanged median less changed median
    if len(target) > 1:
        for key in target:
            medians = [float(np.median([row[key] for row in rows])) for rows in (unchanged, changed)]
            parts[key[:-3]] = {"unchanged_ms": medians[0], "changed_ms": medians[1], "fall_ms": medians[0] - medians[1]}
    mechanism = {}  # the first part is the one the change's mechanism shortens; the rest fell (or rose) beside it
    if parts:
        falls = [p["fall_ms"] for p in parts.values()]
        mechanism = {"parts": parts, "mechanism": next(iter(parts)), "mechanism_fall_ms": falls[0]}
        mechanism["rest_fall_ms"] = sum(falls[1:])
        first = target[0]  # the mechanism's part in each loop, with its middle half: is its fall beyond the spread?
        mechanism["mechanism_sides"] = {
            name: _side([row[first] for row in rows]) for name, rows in (("unchanged", unchanged), ("changed", changed))
        }
    why = None
    if verdict == "inconclusive":
        why = next((name for name, relation in INCONCLUSIVE.items() if holds(relation, values)), None)
    sum_verdict = verdict
    if verdict == "confirmed" and mechanism:
        sides_of = mechanism["mechanism_sides"]
        cause = {"f": mechanism["mechanism_fall_ms"], "t": values["t"]}
        cause.update(mg_hi=sides_of["changed"]["q3_ms"], mu_lo=sides_of["unchanged"]["q1_ms"])
        if holds(CAUSE_MISSED, {**cause, "n": values["n"]}):
            verdict = "refuted"  # the hypothesis's because: its mechanism's part fell far less than predicted
        elif not holds(CAUSE_SHOWN, cause):
            verdict, why = "inconclusive", "cause_unshown"
    return {
        "annotation": hypothesis["annotation"],
        "control": hypothesis["control"],
        "target": hypothesis.get("target", hypothesis["annotation"]),
        "control_label": hypothesis.get("control_label", hypothesis["control"]),
        "whose": hypothesis.get("whose", "your hypothesis"),
        "sides": sides,
        "cut_ms": cut,
        "margin_ms": cut - values["t"],  # confirmed only when this margin exceeds the noise
        "control_drift_ms": drift,
        "spread_ms": spread,
        "noise_ms": values["n"],
        "reach": reach,
        "reach_ms": values["r"],
        "reach_bound": capped["bound"],
        "reach_range": reach_range,
        "baseline_first_ms": float(hypothesis.get("baseline_ms", sides["target"]["unchanged"]["median_ms"])),
        "control_first_ms": float(hypothesis.get("control_baseline_ms", sides["control"]["unchanged"]["median_ms"])),
        "threshold_ms": values["t"],
        **mechanism,
        "verdict": verdict,
        "sum_verdict": sum_verdict,
        "mechanism_missed": sum_verdict == "confirmed" and verdict == "refuted",
        "inconclusive_because": why,
        "confirmed": verdict == "confirmed",
    }
