"""The sentences stages 4 and 5 state about measured values: one row each, kept out of the lesson cells.

A row names the relation a claim rests on, the results key each of its values is recorded under
and one sentence per outcome. `state(out_dir, notebook, name, **values)` picks and records it
through `claims.say`, so tests/test_claims.py re-checks it like any other claim. Placeholders in
angle brackets (`<world>`) are filled from `fill` in the name, the keys and both sentences;
braces take the values.
"""

from typing import NamedTuple

from shardlab.course.claims import say
from shardlab.errors import UsageError
from shardlab.evidence.hypothesis import RELATIONS  # the verdict's rule: one home


class Sentence(NamedTuple):
    relation: str
    keys: dict  # value name -> results key of the same notebook
    true: str
    false: str


def _s(relation, keys, true, false):
    return Sentence(relation, keys, true, false)


SENTENCES = {
    "stage4a_profile": {
        "timing_order": _s(
            "e > c4 and c4 > c1",
            {
                "e": "timing.eager_4dev.median_ms",
                "c4": "timing.compiled_4dev.median_ms",
                "c1": "timing.compiled_1dev.median_ms",
            },
            "eager ({e:.4g} ms) ≫ compiled on four devices ({c4:.4g} ms) > compiled on one ({c1:.4g} ms): on a "
            "workload this small, splitting the update over four logical devices costs more in coordination than it "
            "saves in arithmetic.",
            "the medians are not in the order eager > four devices > one device (eager {e:.4g} ms, four devices "
            "{c4:.4g} ms, one device {c1:.4g} ms): look at the spreads before reading a ratio.",
        ),
        "change_confirmed": _s(
            RELATIONS["confirmed"],
            {"c": "change.cut_ms", "n": "change.noise_ms", "r": "change.reach_ms", "t": "change.threshold_ms"},
            "confirmed: the cut less the noise ({c:.3f} − {n:.3f} ms) still reaches the {t:.3f} ms predicted, and the "
            "cut is within the {r:.3f} ms the change can remove.",
            "not confirmed: the cut less the noise ({c:.3f} − {n:.3f} ms) does not reach the {t:.3f} ms predicted, or "
            "the cut exceeds the {r:.3f} ms the change can remove.",
        ),
        "change_refuted": _s(
            RELATIONS["refuted"],
            {"c": "change.cut_ms", "n": "change.noise_ms", "r": "change.reach_ms", "t": "change.threshold_ms"},
            "refuted: even with the noise added ({c:.3f} + {n:.3f} ms) the cut stays below the {t:.3f} ms predicted.",
            "not refuted: the cut plus the noise ({c:.3f} + {n:.3f} ms) reaches the {t:.3f} ms predicted, or the cut "
            "exceeds the {r:.3f} ms the change can remove.",
        ),
        "cut_beyond_reach": _s(
            "c > r",
            {"c": "change.cut_ms", "r": "change.reach_ms"},
            "inconclusive: the cut ({c:.3f} ms) is larger than all the {r:.3f} ms the change can remove, so something "
            "else moved between the two sides.",
            "The cut ({c:.3f} ms) is within the {r:.3f} ms the change can remove.",
        ),
        "threshold_within_noise": _s(
            "c - n < t and t <= c + n",
            {"c": "change.cut_ms", "n": "change.noise_ms", "t": "change.threshold_ms"},
            "inconclusive: the {t:.3f} ms predicted lies within the cut ± the noise ({c:.3f} ± {n:.3f} ms): at this "
            "sample size the effect cannot be told from the drift.",
            "The {t:.3f} ms predicted lies outside the cut ± the noise ({c:.3f} ± {n:.3f} ms).",
        ),
    },
    "stage4b_beyond": {
        "one_device_is_the_floor": _s(
            "f < p and f < s",
            {
                "f": "fused_timing.median_per_step_ms.floor_1dev",
                "p": "fused_timing.median_per_step_ms.fused_psum",
                "s": "fused_timing.median_per_step_ms.fused_stats",
            },
            "The one-device loop ({f:.3g} ms per step) was faster than both four-device fused loops ({p:.3g} and "
            "{s:.3g} ms): on this host it is the floor they do not reach.",
            "The one-device loop ({f:.3g} ms per step) was not faster than both four-device fused loops ({p:.3g} and "
            "{s:.3g} ms): on this run splitting over four devices paid for its collectives.",
        ),
        "meeting_dominates": _s(
            "m > 0.5 * b",
            {"m": "fused_trace.top_events.largest_meeting_ms", "b": "fused_trace.top_events.busy_ms"},
            "The largest event in which the devices meet or wait (<event>, {m:.2f} ms) covers more than half of the "
            "{b:.2f} ms the busiest thread was busy: with the host work gone, the collectives are what remains.",
            "The largest event in which the devices meet or wait (<event>, {m:.2f} ms) covers at most half of the "
            "{b:.2f} ms the busiest thread was busy: the device program's own work is still a large part.",
        ),
        "course_far_above_roofline": _s(
            "c > 10 * max(p, s)",
            {
                "c": "roofline.points.course_loop.measured_over_roofline",
                "p": "roofline.points.fused_psum.measured_over_roofline",
                "s": "roofline.points.fused_stats.measured_over_roofline",
            },
            "The course step took {c:.0f}x what its roofline allows, more than ten times the fused steps' ({p:.1f}x, "
            "{s:.1f}x): its time is host preparation and dispatch, not arithmetic or memory.",
            "The course step took {c:.0f}x what its roofline allows, within ten times the fused steps' ({p:.1f}x, "
            "{s:.1f}x): on this run moving the transition onto the devices did not bring it much nearer.",
        ),
        "fused_below_byte_roof": _s(
            "max(p, s) < 1",
            {
                "p": "roofline.points.fused_psum.measured_over_roofline",
                "s": "roofline.points.fused_stats.measured_over_roofline",
            },
            "Both fused steps ran faster than their roofline ({p:.1f}x, {s:.1f}x): a measured time cannot beat a real "
            "roof, so XLA's byte count overstates what they move (see below).",
            "The fused steps took {p:.1f}x and {s:.1f}x what their roofline allows.",
        ),
        "fused_at_or_above_byte_roof": _s(
            "min(p, s) >= 1",
            {
                "p": "roofline.points.fused_psum.measured_over_roofline",
                "s": "roofline.points.fused_stats.measured_over_roofline",
            },
            "Both took at least their roofline ({p:.1f}x, {s:.1f}x): the roof, an upper bound on traffic, does not "
            "explain the rest of their time.",
            "One ran faster than its roofline and one did not ({p:.1f}x, {s:.1f}x): for the faster one XLA's byte "
            "count overstates what it moves (see below).",
        ),
    },
    "stage5a_protocol": {
        "p0_kill_within_bound": _s(
            "d <= b",
            {"d": "p0_kill.detect_s", "b": "several_failures.death_bound_s"},
            "that is within the supervisor's bound for a death ({b} s)",
            "that is beyond the supervisor's bound for a death ({b} s)",
        ),
        "startup_dominates": _s(
            "s > p + w",
            {
                "s": "several_failures.goodput.startup",
                "p": "several_failures.goodput.productive",
                "w": "several_failures.goodput.wasted",
            },
            "Start-up ({s:.2f} s) took longer than the productive and the wasted steps together ({p:.2f} + {w:.2f} s): "
            "on this tiny model most of a restart's cost is starting Python, JAX and the coordinator again.",
            "Start-up ({s:.2f} s) took less than the productive and the wasted steps together ({p:.2f} + {w:.2f} s): "
            "here the steps, not the restarts' start-up, took most of the time.",
        ),
        "world_change_<world>_exact": _s(
            "d == 0",
            {"d": "world_change.runs.<world>.max_weight_diff"},
            "bit for bit",
            "within float32 tolerance, not bit for bit",
        ),
        "skip_stop_near_bound": _s(
            "abs(d - (t + p)) <= 2",
            {"d": "skipped_batch.detect_s", "t": "skipped_batch.timeout_s", "p": "skipped_batch.pulse_window_s"},
            "that is the bound ({t} s) plus the pulse check ({p} s), within 2 s",
            "that is more than 2 s away from the bound ({t} s) plus the pulse check ({p} s): the machine was slow to "
            "react",
        ),
    },
    "stage5b_scaling": {
        "async_shortens_<what>": _s(
            "a_hi < s_lo",
            {
                "a": "async_vs_sync.spread.async.<what>_s.median_ms",
                "a_hi": "async_vs_sync.spread.async.<what>_s.q3_ms",
                "s": "async_vs_sync.spread.sync.<what>_s.median_ms",
                "s_lo": "async_vs_sync.spread.sync.<what>_s.q1_ms",
            },
            "Asynchronous saving shortened <label>: median {a} ms against {s} ms, and even its slower quarter (from "
            "{a_hi} ms) stays below the synchronous group's faster quarter (up to {s_lo} ms).",
            "Asynchronous saving did not clearly shorten <label>: median {a} ms against {s} ms.",
        ),
        "async_lengthens_<what>": _s(
            "a_lo > s_hi",
            {"a_lo": "async_vs_sync.spread.async.<what>_s.q1_ms", "s_hi": "async_vs_sync.spread.sync.<what>_s.q3_ms"},
            "It lengthened <label>: the asynchronous group's faster quarter (from {a_lo} ms) lies above the "
            "synchronous group's slower quarter (up to {s_hi} ms): the background save runs on the same host cores "
            "as the steps it was meant to hide behind.",
            "The middle halves of the two groups overlap (async from {a_lo} ms, sync up to {s_hi} ms): the difference "
            "is within the spread of these samples.",
        ),
        "efficiency_within_core_bound": _s(
            "e <= 1.1 * c / w",
            {"e": "efficiency.table.-1.efficiency", "c": "efficiency.usable_cores", "w": "efficiency.table.-1.devices"},
            "efficiency {e:.3f} at W = {w}, within the bound of {c} usable cores shared by {w} devices "
            "(C / W = {c}/{w})",
            "efficiency {e:.3f} at W = {w}, above the bound C / W = {c}/{w} that {c} usable cores allow when every "
            "device computes at the single device's speed: this run's one-device baseline was slower than that",
        ),
        "two_point_fit_predicts_four": _s(
            "abs(p / m - 1) <= 0.1",
            {"p": "scaling_model.held_out.predicted_ms_at_4", "m": "scaling_model.held_out.measured_ms_at_4"},
            "The fit on W = 1, 2 predicts {p:.3f} ms at W = 4 and {m:.3f} ms was measured: within 10 %, so a "
            "logarithmic straggler term describes this machine's three points.",
            "The fit on W = 1, 2 predicts {p:.3f} ms at W = 4 but {m:.3f} ms was measured: more than 10 % off, so a "
            "logarithmic straggler term does not describe how this machine slows down.",
        ),
        "compiles_are_the_tall_bars": _s(
            "c > o",
            {"c": "step_times.compiles.min_compile_ms", "o": "step_times.compiles.max_other_ms"},
            "Steps <steps>, the first of each batch shape, are the tallest bars on both controllers (at least "
            "{c:.0f} ms, every other step at most {o:.0f} ms): compilation, on every process at the same step — "
            "systematic, not noise.",
            "Steps <steps> compile (the first of each batch shape; at least {c:.0f} ms on both controllers), but "
            "another step took as long ({o:.0f} ms): a one-off of this loaded machine, or an event these records do "
            "not name.",
        ),
        "compute_straggler": _s(
            "q1_slow > q3_fast",
            {
                "r": "step_times.compute_spread.ratio",
                "q1_slow": "step_times.compute_spread.slow_q1_ms",
                "q3_fast": "step_times.compute_spread.fast_q3_ms",
            },
            "Process <slow>'s compute median is {r:.2f}× process <fast>'s, and the middle halves do not overlap "
            "(process <slow>'s starts at {q1_slow} ms, above the {q3_fast} ms where process <fast>'s ends): on these "
            "samples it is consistently slower.",
            "Process <slow>'s compute median is {r:.2f}× process <fast>'s, but the middle halves overlap (process "
            "<slow>'s starts at {q1_slow} ms, below the {q3_fast} ms where process <fast>'s ends): these few samples "
            "do not show a straggler.",
        ),
    },
}


def _filled(text: str, fill: dict) -> str:
    for name, value in fill.items():
        text = text.replace(f"<{name}>", str(value))
    return text


def state(out_dir: str, notebook: str, name: str, fill: dict | None = None, **values) -> str:
    """The sentence `name` of `notebook` for `values` (those its relation uses; others ignored), recorded as a claim."""
    row = SENTENCES.get(notebook, {}).get(name)
    if row is None:
        raise UsageError(f"no sentence {name!r} for {notebook}; it has {sorted(SENTENCES.get(notebook, {}))}")
    missing = sorted(set(row.keys) - set(values))
    if missing:
        raise UsageError(f"sentence {name!r} needs the values {sorted(row.keys)}; missing {missing}")
    fill = fill or {}
    return say(
        out_dir,
        notebook,
        _filled(name, fill),
        row.relation,
        {k: (_filled(key, fill), values[k]) for k, key in row.keys.items()},
        true=_filled(row.true, fill),
        false=_filled(row.false, fill),
    )
