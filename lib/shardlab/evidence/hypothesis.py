"""Stage 4's next optimisation: the learner's hypothesis, the change it names, and a judge that watches a control.

The learner reads the first trace and states a hypothesis as a small dict: one change from
`MENU` (changes this module can make and the notebook can gate bit for bit), the cut in
milliseconds of the median of the annotation that change should shorten, and why. `stated`
refuses a cut larger than that median (a change cannot remove more than the whole of what it
targets) and names the **control**, the other annotation, which the change should leave alone.
`changed_loop` builds the change.

`judge` reads the trace taken after the change, the unchanged and the changed loop
alternating in one capture, and judges two claims apart. Every value it reads comes from that
capture. The control's shift between the two sides is drift (the change does not touch it),
and half the widest middle half (25th to 75th percentile) of the four sides is the samples'
own spread; the larger of the two is the `noise` any cut is read against.

The **effect** (`verdict`) is the target's cut against the threshold:

- **confirmed** if the control drifted by no more than the threshold, the threshold is within
  the target's unchanged median, and the cut minus the noise still reaches the threshold;
- **refuted** under the same two conditions when the cut plus the noise stays below it;
- **inconclusive** otherwise, for the first reason of `INCONCLUSIVE` that holds.

The **mechanism** (`mechanism_verdict`), for a target split into parts, where the hypothesis's
reason names the part its change shortens (`MENU[...]["parts"][0]`): **supported** when that
part fell by the threshold beyond the spread (`CAUSE_SHOWN`), **not supported** when it fell
short of the threshold by more than the noise (`CAUSE_MISSED`), else **not shown**. An effect
confirmed beside a mechanism not supported says the target fell as predicted, for another reason.

`RELATIONS`, `INCONCLUSIVE` and `MECHANISM` are `shardlab.course.claims` relations, so the
sentences the notebook prints are chosen by the same rules and re-checked against the recorded values.
"""

from functools import partial

import jax
import numpy as np

from shardlab.core.batch import next_batch as reference_next_batch
from shardlab.errors import UsageError
from shardlab.evidence import timing
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


# change -> what it does, the annotation it should shorten, the control it leaves alone, and (for a target split
# into parts) the parts it shortens and those it leaves alone:
MENU = {
    "one_call_reshuffle": {
        "what": "draw the key split and the permutation in one jitted call (same key, same order)",
        "target": PREPARE,
        "control": UPDATE,
        # where the draw lands in `trace.breakdown`: its dispatches and the host work around them, not placement;
        # the first part is the one its mechanism (fewer dispatches) shortens
        "parts": ("jitted_dispatch", "other"),
        "untouched": ("placement",),
    },
    "packed_psum": {
        "what": "reduce the count, loss and gradient numerators with one packed psum instead of three",
        "target": UPDATE,
        "control": PREPARE,
        "parts": (),
        "untouched": (),
    },
}
# The effect's rule over c (cut), n (noise), d (the control's drift), r (the target's unchanged median in the same
# capture: a change cannot remove more) and t (threshold), all ms; otherwise inconclusive, for the first reason of
# INCONCLUSIVE that holds.
RELATIONS = {
    "confirmed": "abs(d) <= t and t <= r and c - n >= t",
    "refuted": "abs(d) <= t and t <= r and c + n < t",
}
INCONCLUSIVE = {
    "drift_beyond_threshold": "abs(d) > t",
    "threshold_beyond_reach": "t > r",
    "threshold_within_noise": "c - n < t and t <= c + n",
}
# a target split into parts: the mechanism's part fell by the threshold (f), its changed middle half below the
# unchanged one's
CAUSE_SHOWN = "f >= t and mg_hi < mu_lo"
# the same part fell short of the threshold by more than the noise (n), whatever the sum did, where the part's
# unchanged median in this capture (mu) could fall by the threshold at all
CAUSE_MISSED = "t <= mu and f + n < t"
# the threshold is more than the whole part in this capture: no fall of it can show or refute the stated reason
CAUSE_BEYOND_PART = "t > mu"
# the mechanism's verdict: the first that holds, else "not shown"
MECHANISM = {"supported": CAUSE_SHOWN, "not supported": CAUSE_MISSED}


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


def menu(transitions: list[dict]) -> list[dict]:
    """One row per change a hypothesis may name: what it shortens, its median (the most the change can remove:
    no change removes more than the whole of what it shortens) and middle half, and the control with its middle
    half (how far what the change leaves alone spread over these transitions)."""
    rows = []
    for name, entry in MENU.items():
        median, read = _target_median(name, transitions), quantities(name, transitions)
        row = {"change": name, "what it does": entry["what"], "shortens": read["target"], "median ms": round(median, 3)}
        halves = {
            side: np.percentile(_summed(transitions, read[f"{side}_keys"]), [25, 75]) for side in ("target", "control")
        }
        row["middle half ms"] = "{:.3f}–{:.3f}".format(*halves["target"])
        rows.append({**row, "control": read["control_label"]})
        rows[-1]["control's middle half ms"] = "{:.3f}–{:.3f}".format(*halves["control"])
    return rows


def stated(mine, transitions: list[dict], whose: str = "your hypothesis") -> dict:
    """The learner's hypothesis (`change`, `threshold_ms`, `because`) checked, with its annotation and control.

    UsageError for anything else: a change not in MENU, a threshold that is not a positive number
    or that exceeds the median of what the change shortens (a cut the target cannot reach, refuted
    before it is tested), an empty reason.
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
    if not isinstance(because, str) or not because.strip():
        raise UsageError("'because' should say what in the trace points at this change")
    return {
        "change": change,
        "annotation": entry["target"],
        "control": entry["control"],
        **read,
        "baseline_ms": baseline,
        "control_baseline_ms": float(np.median(_summed(transitions, read["control_keys"]))),
        **_first_part(read, transitions),
        "threshold_ms": float(threshold),
        "because": because.strip(),
        "whose": whose,
        "text": (
            f"{whose[0].upper() + whose[1:]}. Change: {entry['what']}.\n"
            f"Hypothesis: the median traced {read['target']} ({baseline:.3f} ms now) falls by at least "
            f"{float(threshold):.3f} ms, with identical ids, losses and weights; {read['control_label']}, which the "
            f"change does not touch, moves by no more than that threshold, {float(threshold):.3f} ms.\n"
            f"Because: {because.strip()}"
        ),
    }


def _first_part(read: dict, transitions: list[dict]) -> dict:
    """The first trace's median of the part the change's mechanism shortens, where the target splits into parts."""
    keys = read.get("target_keys") or []
    if len(keys) < 2:
        return {}
    return {"mechanism_baseline_ms": float(np.median([row[keys[0]] for row in transitions]))}


WORKED = "the worked example"  # while the hypothesis cell is empty; the page folds it until the learner writes theirs


def whose(mine) -> tuple[str, str]:
    """Whose hypothesis and verdict the page shows: the learner's, or the worked example's while `mine` is None."""
    if mine is not None:
        return "your hypothesis", "Your verdict"
    return WORKED, "The worked example's verdict (not yours)"


def worked_example(breakdown: list[dict]) -> dict:
    """The hypothesis run while the learner's is None: one call removes at least half the draw's dispatch time.

    Half the median `jitted_dispatch_ms` of the first trace's `breakdown`; its reason counts the jitted
    calls of the first transition (`dispatched`).
    """
    dispatch = float(np.median([row["jitted_dispatch_ms"] for row in breakdown]))
    threshold = 0.5 * dispatch
    calls = len(breakdown[0]["dispatched"])
    each = ", ".join(f"{row['jitted_dispatch_ms']:.3f}" for row in breakdown)
    because = (
        f"jitted_dispatch takes {dispatch:.3f} ms by median over the first trace's {len(breakdown)} transitions "
        f"({each} ms, transition 1 first), over {calls} jitted "
        f"call{'s' * (calls != 1)} per transition, each dispatched on its own; one call should remove at least "
        f"half of that, {threshold:.3f} ms"
    )
    return {"change": "one_call_reshuffle", "threshold_ms": threshold, "because": because}


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
    """What the verdicts read: the target and the control, each loop's median with its middle half and their
    difference (the cut, the drift); for a target split into parts, then the part the mechanism's verdict reads
    (its fall) and each of its other parts (median only); last the threshold and the noise the cut is read against."""
    sides, rows = outcome["sides"], []
    labels = {"target": outcome.get("target", outcome["annotation"]), "control": outcome.get("control_label")}
    for role, fall, key in (("target", "cut", "cut_ms"), ("control", "drift", "control_drift_ms")):
        rows.append(
            {
                "medians, ms (middle half)": f"{role}: {labels[role] or outcome[role]}",
                "unchanged loop": _median_and_half(sides[role]["unchanged"]),
                "changed loop": _median_and_half(sides[role]["changed"]),
                "unchanged − changed": f"{fall} {outcome[key]:.3f}",
            }
        )
    if "mechanism_sides" in outcome:  # the part the stated reason names, which the mechanism's verdict reads
        part = outcome["mechanism_sides"]
        rows.append(
            {
                "medians, ms (middle half)": f"mechanism: {outcome['mechanism']}, the target's part the reason names",
                "unchanged loop": _median_and_half(part["unchanged"]),
                "changed loop": _median_and_half(part["changed"]),
                "unchanged − changed": f"fall {outcome['mechanism_fall_ms']:.3f}",
            }
        )
        for name, part in list(outcome["parts"].items())[1:]:  # the target's other parts, beside it: medians only
            rows.append(
                {
                    "medians, ms (middle half)": f"rest: {name}, the target's part the reason does not name",
                    "unchanged loop": f"{part['unchanged_ms']:.3f}",
                    "changed loop": f"{part['changed_ms']:.3f}",
                    "unchanged − changed": f"fall {part['fall_ms']:.3f}",
                }
            )
    rows.append(
        {
            "medians, ms (middle half)": "noise: the larger of the control's |drift| and half the widest middle "
            "half of the target's and the control's rows",
            "unchanged loop": "",
            "changed loop": "",
            "unchanged − changed": f"threshold {outcome['threshold_ms']:.3f}, noise {outcome['noise_ms']:.3f}",
        }
    )
    return rows


def _median_and_half(side: dict) -> str:
    """A `timing.spread` as the tables print it: "median (q1–q3)", ms."""
    return f"{side['median_ms']:.3f} ({side['q1_ms']:.3f}–{side['q3_ms']:.3f})"


def judge(hypothesis: dict, unchanged: list[dict], changed: list[dict]) -> dict:
    """The effect's and the mechanism's verdicts on `hypothesis`, from annotation rows of both loops traced in one
    capture, the control in view.

    Every value is of this capture: the cut is bounded by the target's unchanged median here (`reach_ms`).
    The first trace's median of the target (`hypothesis["baseline_ms"]`, where given) is kept beside this
    capture's, to show whether the baseline moved between the captures.
    """
    from shardlab.course.claims import holds

    target = hypothesis.get("target_keys") or [f"{hypothesis['annotation']}_ms"]
    control = hypothesis.get("control_keys") or [f"{hypothesis['control']}_ms"]
    sides = {
        role: {
            name: timing.spread(_summed(rows, keys)) for name, rows in (("unchanged", unchanged), ("changed", changed))
        }
        for role, keys in (("target", target), ("control", control))
    }
    cut = sides["target"]["unchanged"]["median_ms"] - sides["target"]["changed"]["median_ms"]
    drift = sides["control"]["unchanged"]["median_ms"] - sides["control"]["changed"]["median_ms"]
    spread = max((s["q3_ms"] - s["q1_ms"]) / 2 for part in sides.values() for s in part.values())
    values = {"c": cut, "n": max(abs(drift), spread), "d": drift, "r": sides["target"]["unchanged"]["median_ms"]}
    values["t"] = hypothesis["threshold_ms"]
    verdict = next((name for name, relation in RELATIONS.items() if holds(relation, values)), "inconclusive")
    why = None
    if verdict == "inconclusive":
        why = next((name for name, relation in INCONCLUSIVE.items() if holds(relation, values)), None)
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
        sides_of = {
            name: timing.spread([row[first] for row in rows])
            for name, rows in (("unchanged", unchanged), ("changed", changed))
        }
        mechanism["mechanism_sides"] = sides_of
        mechanism["mechanism_first_ms"] = float(
            hypothesis.get("mechanism_baseline_ms", sides_of["unchanged"]["median_ms"])
        )
        cause = {"f": falls[0], "t": values["t"], "n": values["n"], "mu": sides_of["unchanged"]["median_ms"]}
        cause.update(mg_hi=sides_of["changed"]["q3_ms"], mu_lo=sides_of["unchanged"]["q1_ms"])
        found = (name for name, relation in MECHANISM.items() if holds(relation, cause))
        mechanism["mechanism_verdict"] = next(found, "not shown")
    return {
        "annotation": hypothesis["annotation"],
        "control": hypothesis["control"],
        "target": hypothesis.get("target", hypothesis["annotation"]),
        "control_label": hypothesis.get("control_label", hypothesis["control"]),
        "whose": hypothesis.get("whose", "your hypothesis"),
        "sides": sides,
        "cut_ms": cut,
        "margin_ms": cut - values["t"],  # the effect is confirmed only when this margin reaches the noise
        "control_drift_ms": drift,
        "spread_ms": spread,
        "noise_ms": values["n"],
        "reach_ms": values["r"],
        "baseline_first_ms": float(hypothesis.get("baseline_ms", sides["target"]["unchanged"]["median_ms"])),
        "control_first_ms": float(hypothesis.get("control_baseline_ms", sides["control"]["unchanged"]["median_ms"])),
        "threshold_ms": values["t"],
        **mechanism,
        "verdict": verdict,
        "inconclusive_because": why,
        "confirmed": verdict == "confirmed",
    }
