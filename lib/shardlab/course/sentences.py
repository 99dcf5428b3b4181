"""The sentences stages 4 and 5 state about measured values: one row each, kept out of the lesson cells.

A row names the relation a claim rests on, the results key each of its values is recorded under
and one sentence per outcome. In a lesson cell `chosen(notebook, name, fill, **values)` picks the
sentence its values choose and keeps it; the notebook's closing cell files every kept sentence with
the table's results keys (`record(out_dir, notebook)`), so tests/test_claims.py re-checks it like
any other claim and no lesson cell names a results key or an output folder. `state` and `first`
pick and file at once (for a caller without a closing cell). Placeholders in angle brackets
(`<world>`) are filled from `fill` in the name, the keys and both sentences; braces take the values.
"""

from typing import NamedTuple

from shardlab.course import claims
from shardlab.course.claims import choose, holds
from shardlab.errors import UsageError
from shardlab.evidence.hypothesis import (  # the verdicts' rules
    CAUSE_BEYOND_PART,
    CAUSE_MISSED,
    CAUSE_SHOWN,
    INCONCLUSIVE,
    RELATIONS,
)
from shardlab.perf.roofline import DIGITS as ROOFLINE_DIGITS
from shardlab.perf.roofline import gap as roofline_gap
from shardlab.perf.roofline import over_shared_roof


class Sentence(NamedTuple):
    relation: str
    keys: dict  # value name -> results key of the same notebook
    true: str
    false: str


def _s(relation, keys, true, false):
    return Sentence(relation, keys, true, false)


CHANGE = {  # the verdict's values
    "c": "change.cut_ms",
    "n": "change.noise_ms",
    "d": "change.control_drift_ms",
    "r": "change.reach_ms",
    "t": "change.threshold_ms",
    "m": "change.margin_ms",
    "s": "change.spread_ms",
}
PART = {  # stage 4a: the medians of the part the change's mechanism shortens, in each loop
    "mu": "change.mechanism_sides.unchanged.median_ms",
    "mg": "change.mechanism_sides.changed.median_ms",
}
CAUSE = {  # stage 4a's mechanism verdict: the mechanism's part, named apart from the control's quartiles
    "f": "change.mechanism_fall_ms",
    "t": "change.threshold_ms",
    "n": "change.noise_ms",
    "mu": "change.mechanism_sides.unchanged.median_ms",
    "mg": "change.mechanism_sides.changed.median_ms",
    "mu_lo": "change.mechanism_sides.unchanged.q1_ms",
    "mu_hi": "change.mechanism_sides.unchanged.q3_ms",
    "mg_lo": "change.mechanism_sides.changed.q1_ms",
    "mg_hi": "change.mechanism_sides.changed.q3_ms",
}
WAITING = {  # stage 4b: the busiest thread's own time during the fused dispatches, by what each event is
    "w": "fused_trace.top_events.waiting_ms",
    "c": "fused_trace.top_events.collective_ms",
    "p": "fused_trace.top_events.program_ms",
    "b": "fused_trace.top_events.busy_ms",
}
NEAR = (2, 10, 100)  # stage 4b's prediction: the nearest of 2x, 10x, 100x in log ratio (met at geometric means)
SPEEDUP = {"s": "fused_timing.speedup_over_course.<loop>"}
FUSED_PAIR = {  # stage 4b: fused_stats and fused_psum per step, each median with its middle half
    "s": "fused_timing.median_per_step_ms.fused_stats",
    "s_lo": "fused_timing.middle_half_per_step_ms.fused_stats.0",
    "s_hi": "fused_timing.middle_half_per_step_ms.fused_stats.1",
    "p": "fused_timing.median_per_step_ms.fused_psum",
    "p_lo": "fused_timing.middle_half_per_step_ms.fused_psum.0",
    "p_hi": "fused_timing.middle_half_per_step_ms.fused_psum.1",
}
NEAREST = ["speedup_below_1x_<loop>", "speedup_near_2x_<loop>", "speedup_near_10x_<loop>"]
_PROGRAM = "the arithmetic, sampler, gather and runtime"
CLEAR = 1.25  # stage 4b: one short capture has no spread, so one traced part is called longer only beyond this
# stage 4b's measured/roofline ratios, rounded as the table rounds them (perf.roofline.DIGITS): one rounding each
_U, _P, _S = (
    f"{{{v}:.{ROOFLINE_DIGITS[n]}f}}" for v, n in (("u", "course_update"), ("p", "fused_psum"), ("s", "fused_stats"))
)
_ROWS = (  # stage 4b: what each roofline row's measured time covers
    "The course row times one call of its compiled update on a placed batch; a fused row is one dispatch of K "
    "steps divided by K, a program that also samples and gathers."
)
_COPY = (  # stage 4b: why the fused ratios are lower bounds
    "the fused byte counts include the dataset copy every gather reads from, so their rooflines are too high and "
    "their ratios too low."
)
SPEEDUP_SPREAD = {  # stage 4b: a loop's speedup with the course loop's and its own middle halves per step
    "s": "fused_timing.speedup_over_course.<loop>",
    "c_lo": "fused_timing.middle_half_per_step_ms.course_loop.0",
    "c_hi": "fused_timing.middle_half_per_step_ms.course_loop.1",
    "l_lo": "fused_timing.middle_half_per_step_ms.<loop>.0",
    "l_hi": "fused_timing.middle_half_per_step_ms.<loop>.1",
}
STRAGGLER = {  # stage 5b's per-controller phase spreads: the longer half's start, the shorter's end, the processes
    "q1_slow": "step_times.compute_spread.slow_q1_ms",
    "q3_fast": "step_times.compute_spread.fast_q3_ms",
    "q1_wait": "step_times.agreement_spread.waits_q1_ms",
    "q3_late": "step_times.agreement_spread.late_q3_ms",
    "ps": "step_times.compute_spread.slow",
    "pl": "step_times.agreement_spread.late",
}
ASYNC_SPREAD = {  # stage 5b's async and sync save times for one part of a save (<what>): median and middle half
    "a": "async_vs_sync.spread.async.<what>_s.median_ms",
    "a_lo": "async_vs_sync.spread.async.<what>_s.q1_ms",
    "a_hi": "async_vs_sync.spread.async.<what>_s.q3_ms",
    "s": "async_vs_sync.spread.sync.<what>_s.median_ms",
    "s_lo": "async_vs_sync.spread.sync.<what>_s.q1_ms",
    "s_hi": "async_vs_sync.spread.sync.<what>_s.q3_ms",
}
EFFICIENCY_RANGE = {  # stage 5b: the largest W's efficiency over the middle halves, its devices and the usable cores
    "e_lo": "efficiency.table.-1.efficiency_range.0",
    "e_hi": "efficiency.table.-1.efficiency_range.1",
    "w": "efficiency.table.-1.devices",
    "c": "efficiency.usable_cores",
}
EFFICIENCY_OPTION = {**EFFICIENCY_RANGE, "e": "efficiency.table.-1.efficiency"}  # stage 5b's W = 4 prediction
THROUGHPUT = {  # stage 5b's rows per second at W = 1 and at the largest W, with their middle halves
    "n1": "efficiency.table.0.rows_per_s",
    "n1_lo": "efficiency.table.0.rows_per_s_middle_half.0",
    "n1_hi": "efficiency.table.0.rows_per_s_middle_half.1",
    "nw": "efficiency.table.-1.rows_per_s",
    "nw_lo": "efficiency.table.-1.rows_per_s_middle_half.0",
    "nw_hi": "efficiency.table.-1.rows_per_s_middle_half.1",
    "e": "efficiency.table.-1.efficiency",
    "e_lo": "efficiency.table.-1.efficiency_range.0",
    "e_hi": "efficiency.table.-1.efficiency_range.1",
    "w": "efficiency.table.-1.devices",
}
SECOND_DEVICE = {  # stage 5b: rows per second at W = 1 and at the next W, the efficiencies there and at the largest W
    "n1": "efficiency.table.0.rows_per_s",
    "n1_hi": "efficiency.table.0.rows_per_s_middle_half.1",
    "n2": "efficiency.table.1.rows_per_s",
    "n2_lo": "efficiency.table.1.rows_per_s_middle_half.0",
    "w2": "efficiency.table.1.devices",
    "e2": "efficiency.table.1.efficiency",
    "e": "efficiency.table.-1.efficiency",
    "w": "efficiency.table.-1.devices",
    "c": "efficiency.usable_cores",
}
LAST_STEP = {  # stage 5b: rows per second at the W before the largest and at the largest, with their middle halves
    "n2": "efficiency.table.-2.rows_per_s",
    "n2_lo": "efficiency.table.-2.rows_per_s_middle_half.0",
    "n2_hi": "efficiency.table.-2.rows_per_s_middle_half.1",
    "nw": "efficiency.table.-1.rows_per_s",
    "nw_lo": "efficiency.table.-1.rows_per_s_middle_half.0",
    "nw_hi": "efficiency.table.-1.rows_per_s_middle_half.1",
    "w2": "efficiency.table.-2.devices",
    "w": "efficiency.table.-1.devices",
}
# stage 4a's verdict on the effect: the first of these that holds is printed
VERDICT = (
    "change_confirmed",
    "change_refuted_real_cut",
    "change_refuted",
    "drift_beyond_threshold",
    "threshold_beyond_reach",
    "threshold_within_noise_real_cut",
    "threshold_within_noise",
)

# stage 3a's fault ranking: the first of these that holds is printed; x, y, z are the faults by fixture a's errors
FAULT_RANKING = ("fault_order_same", "fault_costliest_same", "fault_costliest_differs")
FAULT_KEYS = {f"{v}_{s}": f"fault_ranking.errors.<{s}>.<{v}>" for s in "ab" for v in "xyz"}


# the stage 4a timing medians, middle halves and ratios both timing sentences read
TIMING_KEYS = {
    "e": "timing.eager_4dev.median_ms",
    "e_lo": "timing.eager_4dev.q1_ms",
    "c4": "timing.compiled_4dev.median_ms",
    "c4_lo": "timing.compiled_4dev.q1_ms",
    "c4_hi": "timing.compiled_4dev.q3_ms",
    "c1": "timing.compiled_1dev.median_ms",
    "c1_hi": "timing.compiled_1dev.q3_ms",
    "r": "timing.ratios.compiled_4dev_over_compiled_1dev",
    "re": "timing.ratios.eager_4dev_over_compiled_4dev",
    "rc": "timing.ratios.eager_4dev_less_compile_over_compiled_4dev",
}


# stage 4a: the first trace's two annotations, each with its median and middle half, and how often each was longer
DOMINANCE = {
    "p": "trace.dominant.median_prepare_and_place_ms",
    "p_lo": "trace.dominant.q1_prepare_and_place_ms",
    "p_hi": "trace.dominant.q3_prepare_and_place_ms",
    "u": "trace.dominant.median_compiled_update_and_wait_ms",
    "u_lo": "trace.dominant.q1_compiled_update_and_wait_ms",
    "u_hi": "trace.dominant.q3_compiled_update_and_wait_ms",
    "k": "trace.dominant.prepare_longer_in",
    "n": "trace.dominant.transitions",
}
DOMINANCE_NAMES = ["prepare_longer", "update_longer"]  # the last one's other sentence: the middle halves overlap
EXAMPLE_TARGET_NAMES = ["example_target_longer", "example_target_shorter"]
_HALVES = "prepare_and_place {p_lo:.3f}–{p_hi:.3f} ms, compiled_update_and_wait {u_lo:.3f}–{u_hi:.3f} ms"
_WHY_PARTS = (
    " The change replaces the sampler's draw: its jitted calls fall in jitted_dispatch, its copies back to the host "
    "in other, so the target is both parts. The threshold is sized from jitted_dispatch alone: other also holds "
    "gathering and padding the change leaves alone, so this trace cannot say how much of other goes."
)
_WHY_COUNT = (
    "the first trace counts the jitted calls inside prepare_and_place, one per dispatch, so their cut can be sized "
    "from it; it shows the update only as one duration, nothing of the time its three psums take"
)

SENTENCES = {
    "stage4a_profile": {
        "prepare_longer": _s(
            "p_lo > u_hi",
            DOMINANCE,
            "prepare_and_place is longer beyond the spread: its middle half lies above the update's (" + _HALVES + "); "
            "by median {p:.3f} against {u:.3f} ms, longer in {k} of {n} transitions.",
            "prepare_and_place is not longer beyond the spread (" + _HALVES + ").",
        ),
        "update_longer": _s(
            "u_lo > p_hi",
            DOMINANCE,
            "compiled_update_and_wait is longer beyond the spread: its middle half lies above the preparation's ("
            + _HALVES
            + "); by median {u:.3f} against {p:.3f} ms, prepare_and_place longer in only {k} of {n} transitions.",
            "Neither annotation is longer beyond the spread: the middle halves overlap (" + _HALVES + "), and "
            "prepare_and_place was the longer in {k} of {n} transitions. The medians, {p:.3f} and {u:.3f} ms, do not "
            "say which dominates; more transitions might.",
        ),
        "trace_outliers": _s(
            "o == 0",
            {"o": "trace.dominant.outlier_count", "c": "environment.cpu_count"},
            "No traced duration is more than twice its annotation's median.",
            "<listed>: more than twice the annotation's median, after the warm-up. What made so long a duration is not "
            "shown here (the profiler's own work, another process on this host's {c} CPUs and memory allocation are "
            "candidates this page does not measure); such durations stay in the medians and middle halves above, "
            "not dropped.",
        ),
        "example_target_longer": _s(
            "p_lo > u_hi",
            DOMINANCE,
            "Why the worked example changes prepare_and_place, not the update: it was the longer annotation beyond the "
            "spread in the first trace." + _WHY_PARTS,
            "Why the worked example changes prepare_and_place, not the update: it was not longer beyond the spread in "
            "the first trace (" + _HALVES + ")." + _WHY_PARTS,
        ),
        "example_target_shorter": _s(
            "u_lo > p_hi",
            DOMINANCE,
            "Why the worked example changes prepare_and_place, not the update: compiled_update_and_wait was the "
            "longer annotation in the first trace, yet the example shortens the preparation: "
            + _WHY_COUNT
            + ". A hypothesis about the update is yours to size."
            + _WHY_PARTS,
            "Why the worked example changes prepare_and_place, not the update: neither annotation was longer beyond "
            "the spread in the first trace, so the example picks the change whose cut the trace lets it size: "
            + _WHY_COUNT
            + "."
            + _WHY_PARTS,
        ),
        "example_calls": _s(
            "hi > 2 * lo",
            {"lo": "trace_example.fastest_ms", "hi": "trace_example.slowest_ms"},
            "The small capture above called the same compiled `tiny` three times (a `Compiled` cannot recompile): "
            "the calls took from {lo:.3f} to {hi:.3f} ms, the slowest more than twice the fastest. Single calls under "
            "the profiler can vary that much with nothing recompiled, so the traces here are read by median and "
            "middle half over several transitions, never by one call.",
            "The small capture above called the same compiled `tiny` three times (a `Compiled` cannot recompile): "
            "the calls took from {lo:.3f} to {hi:.3f} ms, the slowest not more than twice the fastest. Single calls "
            "still vary, so the traces here are read by median and middle half over several transitions, never by "
            "one call.",
        ),
        "capture_drift": _s(
            "2 * abs(b - r) >= abs(c)",
            {"b": "change.baseline_first_ms", "r": "change.reach_ms", "c": "change.cut_ms"},
            "With no code changed, the target moved between captures: {b:.3f} ms by median in the first trace, "
            "{r:.3f} ms in this capture's unchanged loop, at least half the {c:.3f} ms cut. So the verdicts, and the "
            "noise they use, read only this capture's two loops, traced in turn.",
            "With no code changed, the target went from {b:.3f} ms by median in the first trace to {r:.3f} ms in this "
            "capture's unchanged loop, less than half the {c:.3f} ms cut; the verdicts, and the noise they use, still "
            "read only this capture's two loops, traced in turn.",
        ),
        "timing_order": _s(
            "e_lo > c4_hi and c4_lo > c1_hi",
            TIMING_KEYS,
            "eager ≫ compiled on four devices > compiled on one, and the middle halves do not overlap: the order "
            "holds beyond the spread. By median, 4-device / 1-device = {r:.2f}x and eager / 4-device = {re:.0f}x "
            "(compiling included: the last column counts it; {rc:.0f}x by the median of each call less its own "
            "compile time). On "
            "so small a workload, four logical devices cost more than they save here (they share this host's "
            "cores; this page does not measure which cost dominates).",
            "the order eager > four devices > one device is not clear beyond the spread: some middle halves meet "
            "(four devices {c4_lo:.4g}–{c4_hi:.4g} ms, one device up to {c1_hi:.4g}). So the ratios of the medians, "
            "4-device / 1-device = {r:.2f}x and eager / 4-device = {re:.0f}x, are within the spread.",
        ),
        "timing_eager_clear": _s(
            "e_lo > max(c4_hi, c1_hi)",
            TIMING_KEYS,
            "eager ≫ compiled (eager / 4-device = {re:.0f}x, compiling included: the last column counts it; {rc:.0f}x "
            "by the median of each call less its own compile time): that "
            "gap is clear beyond the spread. Four devices "
            "against one is not: the middle halves meet (four devices {c4_lo:.4g}–{c4_hi:.4g} ms, one device up to "
            "{c1_hi:.4g} ms), so the ratio of their medians, 4-device / 1-device = {r:.2f}x, is within the spread.",
            "the order eager > four devices > one device is not clear beyond the spread: the middle halves meet "
            "(eager from {e_lo:.4g} ms, four devices {c4_lo:.4g}–{c4_hi:.4g}, one device up to {c1_hi:.4g}). So "
            "the ratios of the medians, 4-device / 1-device = {r:.2f}x and eager / 4-device = {re:.0f}x, are within "
            "the spread.",
        ),
        "change_confirmed": _s(
            RELATIONS["confirmed"],
            CHANGE,
            "<verdict_of>: confirmed. The cut passes the threshold by {m:.3f} ms, at least the noise.",
            "<verdict_of>: not confirmed (cut {c:.3f} ms, threshold {t:.3f} ms, cut − threshold "
            "{m:.3f} ms against noise {n:.3f} ms: control drift {d:.3f} ms, spread {s:.3f} ms; the target's unchanged "
            "median {r:.3f} ms).",
        ),
        "change_refuted_real_cut": _s(
            RELATIONS["refuted"] + " and c - n > 0",
            CHANGE,
            "<verdict_of>: refuted. Even the cut plus the noise stays below the threshold; the cut itself is "
            "larger than the noise: the change did shorten its target, by less than predicted.",
            "<verdict_of>: not refuted with a cut beyond the noise (cut {c:.3f} ms, noise {n:.3f} ms, control drift "
            "{d:.3f} ms, threshold {t:.3f} ms).",
        ),
        "change_refuted": _s(
            RELATIONS["refuted"] + " and c - n <= 0",
            CHANGE,
            "<verdict_of>: refuted. Even the cut plus the noise stays below the threshold, and the cut is within "
            "the noise: this capture shows no measurable cut from the change.",
            "<verdict_of>: not refuted (cut {c:.3f} ms, noise {n:.3f} ms, control drift {d:.3f} ms, threshold "
            "{t:.3f} ms).",
        ),
        "drift_beyond_threshold": _s(
            INCONCLUSIVE["drift_beyond_threshold"],
            {
                "d": "change.control_drift_ms",
                "t": "change.threshold_ms",
                "u_lo": "change.sides.control.unchanged.q1_ms",
                "u_hi": "change.sides.control.unchanged.q3_ms",
                "g_lo": "change.sides.control.changed.q1_ms",
                "g_hi": "change.sides.control.changed.q3_ms",
            },
            "<verdict_of>: inconclusive. The control, which the change does not touch, drifted by more than the "
            "threshold: the machine moved as much as the effect looked for. Measure again.",
            "The control moved by {d:.3f} ms (middle half {u_lo:.3f}–{u_hi:.3f} ms unchanged, {g_lo:.3f}–{g_hi:.3f} "
            "ms changed), within ± the {t:.3f} ms threshold.",
        ),
        "threshold_beyond_reach": _s(
            INCONCLUSIVE["threshold_beyond_reach"],
            {"t": "change.threshold_ms", "r": "change.reach_ms", "b": "change.baseline_first_ms"},
            "<verdict_of>: inconclusive. The {t:.3f} ms predicted is more than the whole of the "
            "target in this capture, {r:.3f} ms by median in the unchanged loop: the threshold was set when the "
            "target measured {b:.3f} ms, and the baseline has moved since. Restate the prediction against this "
            "capture, or measure again.",
            "The {t:.3f} ms predicted is within the {r:.3f} ms the target measured in this capture's unchanged loop.",
        ),
        "threshold_within_noise_real_cut": _s(
            INCONCLUSIVE["threshold_within_noise"] + " and c > n",
            CHANGE,
            "<verdict_of>: inconclusive. The change did cut its target, by more than the noise. Whether the cut "
            "reached the threshold cannot be told with this much noise: the margin, cut − threshold = {m:.3f} ms, "
            "lies within ± the noise.",
            "The cut ({c:.3f} ms) is not more than the {n:.3f} ms of noise, or its margin over the {t:.3f} ms "
            "threshold ({m:.3f} ms) lies outside ± the noise.",
        ),
        "threshold_within_noise": _s(
            INCONCLUSIVE["threshold_within_noise"],
            {"c": "change.cut_ms", "n": "change.noise_ms", "t": "change.threshold_ms", "m": "change.margin_ms"},
            "<verdict_of>: inconclusive. The cut is not more than the noise, and the margin, cut − threshold = "
            "{m:.3f} ms, lies within ± that noise. With this much noise neither the effect nor whether it reaches "
            "the threshold can be told.",
            "The margin, cut − threshold = {m:.3f} ms, lies outside ± the {n:.3f} ms of noise.",
        ),
        "mechanism_supported": _s(
            CAUSE_SHOWN,
            CAUSE,
            "<verdict_of>: supported. <part>, the part the stated reason names, went {mu:.3f} → {mg:.3f} ms by "
            "median, a fall of {f:.3f} ms, at least the {t:.3f} ms threshold, and beyond the spread: middle half "
            "{mg_lo:.3f}–{mg_hi:.3f} ms changed, {mu_lo:.3f}–{mu_hi:.3f} ms unchanged. It reads the threshold in ms, "
            "not as a share of <part>.",
            "<verdict_of>: not supported beyond the spread (<part> fell by {f:.3f} ms, threshold "
            "{t:.3f} ms; middle half {mu_lo:.3f}–{mu_hi:.3f} ms unchanged, {mg_lo:.3f}–{mg_hi:.3f} ms changed).",
        ),
        "mechanism_not_supported": _s(
            CAUSE_MISSED,
            CAUSE,
            "<verdict_of>: not supported. <part>, the part the stated reason names, went {mu:.3f} → {mg:.3f} ms "
            "by median, a fall of {f:.3f} ms, short of the {t:.3f} ms predicted by more than the {n:.3f} ms of "
            "noise. Whatever the effect, this capture does not support the stated reason.",
            "<verdict_of>: not short of the threshold by more than the noise (<part> fell by "
            "{f:.3f} ms, threshold {t:.3f} ms, noise {n:.3f} ms).",
        ),
        "mechanism_beyond_its_part": _s(
            CAUSE_BEYOND_PART,
            CAUSE,
            "<verdict_of>: not shown. The {t:.3f} ms threshold is more than the whole of <part> in this capture's "
            "unchanged loop ({mu:.3f} ms by median; {mg:.3f} ms changed), so no fall of it could reach the threshold. "
            "The prediction was sized from the first trace, not from this capture.",
            "<verdict_of>: the threshold ({t:.3f} ms) is within <part>'s unchanged median ({mu:.3f} ms) here.",
        ),
        "mechanism_not_shown": _s(
            f"not ({CAUSE_SHOWN}) and not ({CAUSE_MISSED})",
            CAUSE,
            "<verdict_of>: not shown. <part>, the part the stated reason names, fell by {f:.3f} ms by median "
            "(threshold {t:.3f} ms, noise {n:.3f} ms; middle halves {mu_lo:.3f}–{mu_hi:.3f} ms unchanged, "
            "{mg_lo:.3f}–{mg_hi:.3f} ms changed). That is neither the threshold beyond the spread nor short of it "
            "by more than the noise.",
            "<verdict_of>: shown one way or the other (<part> fell by {f:.3f} ms, threshold "
            "{t:.3f} ms, noise {n:.3f} ms).",
        ),
        "cut_mostly_elsewhere": _s(
            "o > 0.5 * c and o > f",
            {"f": "change.mechanism_fall_ms", "o": "change.rest_fall_ms", "c": "change.cut_ms", **PART},
            "Most of the cut went elsewhere: the sum fell by {c:.3f} ms, <rest> by {o:.3f} ms (each a fall of "
            "medians, so the parts' falls need not add up to the sum's). A candidate, not measured here: the course's "
            "draw copies back to the host twice, the changed one once.",
            "Most of the cut did not go to <rest>: the sum fell by {c:.3f} ms, <rest> by {o:.3f} ms (a negative "
            "fall is a rise), <part> went {mu:.3f} → {mg:.3f} ms.",
        ),
    },
    "stage3a_checkpoint": {  # fault_ranking: the faults x > y > z by fixture a's final-weight errors
        "fault_order_same": _s(
            "x_a > y_a > z_a and x_b > y_b > z_b",
            FAULT_KEYS,
            "In this run, both settings rank the three faults in the same order, <x> > <y> > <z> (<x>: {x_a:.4g} and "
            "{x_b:.4g}); two settings are too few to call that a rule.",
            "This run's two settings do not rank the three faults in the same strict order.",
        ),
        "fault_costliest_same": _s(
            "x_a > y_a > z_a and x_b > z_b > y_b",
            FAULT_KEYS,
            "In this run, a reset <x> costs most in both settings ({x_a:.4g} in <a>, {x_b:.4g} in <b>); only the two "
            "smaller faults swap places (<y> > <z> in <a>, <z> > <y> in <b>).",
            "This run's two settings do not share their costliest fault with only the two smaller ones swapped.",
        ),
        "fault_costliest_differs": _s(
            "x_a > max(y_a, z_a) and x_b < max(y_b, z_b)",
            FAULT_KEYS,
            "In this run, the costliest fault differs: a reset <x> costs most in <a> ({x_a:.4g}) but not in <b> "
            "({x_b:.4g}).",
            "Two faults cost exactly the same in one setting (<x> {x_a:.4g}, <y> {y_a:.4g}, <z> {z_a:.4g} in <a>; "
            "{x_b:.4g}, {y_b:.4g}, {z_b:.4g} in <b>), so the settings' orders cannot be compared strictly.",
        ),
        "fault_order_as_original_<s>": _s(
            "p > q > r",
            {v: f"fault_ranking.errors.<s>.<{v}>" for v in "pqr"},
            "<s>: the original course's order, <p> > <q> > <r>, holds here too ({p:.4g} > {q:.4g} > {r:.4g}).",
            "<s>: the original course's order, <p> > <q> > <r>, does not hold here (<p> {p:.4g}, <q> {q:.4g}, "
            "<r> {r:.4g}).",
        ),
    },
    "stage4b_beyond": {
        "stats_faster_than_psum": _s(
            "s_hi < p_lo",
            FUSED_PAIR,
            "fused_stats, one collective per dispatch, was faster per step than fused_psum, one per step, beyond the "
            "spread: {s:.3g} ms (middle half {s_lo:.3g}–{s_hi:.3g}) against {p:.3g} ms ({p_lo:.3g}–{p_hi:.3g}).",
            "fused_stats, one collective per dispatch, was not faster per step than fused_psum, one per step, beyond "
            "the spread: {s:.3g} ms (middle half {s_lo:.3g}–{s_hi:.3g}) against {p:.3g} ms ({p_lo:.3g}–{p_hi:.3g}).",
        ),
        "stats_slower_than_psum": _s(
            "s_lo > p_hi",
            FUSED_PAIR,
            "fused_stats, one collective per dispatch, was slower per step than fused_psum, one per step, beyond the "
            "spread: {s:.3g} ms (middle half {s_lo:.3g}–{s_hi:.3g}) against {p:.3g} ms ({p_lo:.3g}–{p_hi:.3g}). "
            "A possible reason, not measured on this page: its one collective carries every step's d × d matrix A "
            "(section 3), where fused_psum's carries d + 2 numbers a step.",
            "fused_stats, one collective per dispatch, was neither faster nor slower per step than fused_psum, one per "
            "step, beyond the spread: {s:.3g} ms (middle half {s_lo:.3g}–{s_hi:.3g}) against {p:.3g} ms "
            "({p_lo:.3g}–{p_hi:.3g}), middle halves overlapping: whichever median is lower, the spread covers the "
            "difference. The two collectives also differ in size, not only in number: fused_stats' one carries every "
            "step's d × d matrix A (section 3), fused_psum's d + 2 numbers a step.",
        ),
        "speedup_below_1x_<loop>": _s(
            "s < 1",
            SPEEDUP,
            "<loop> was slower than the course loop ({s:.2f}x), nearest none of them",
            "<loop> {s:.1f}x is at least 1x",
        ),
        "speedup_spread_crosses_<loop>": _s(
            f"c_lo * c_lo < {NEAR[0] * NEAR[1]} * l_hi * l_hi and c_hi * c_hi > {NEAR[0] * NEAR[1]} * l_lo * l_lo "
            f"or c_lo * c_lo < {NEAR[1] * NEAR[2]} * l_hi * l_hi and c_hi * c_hi > {NEAR[1] * NEAR[2]} * l_lo * l_lo",
            SPEEDUP_SPREAD,
            "<loop> {s:.1f}x at the medians, but <lo>x–<hi>x over the middle halves, across where <spans> meet: "
            "this run does not tell them apart",
            "<loop> {s:.1f}x stays on one side of where the options meet over the middle halves (<lo>x–<hi>x)",
        ),
        "speedup_near_2x_<loop>": _s(
            f"s * s < {NEAR[0] * NEAR[1]}",
            SPEEDUP,
            "<loop> {s:.1f}x is nearest 2x",
            "<loop> {s:.1f}x is not nearest 2x",
        ),
        "speedup_near_10x_<loop>": _s(
            f"s * s < {NEAR[1] * NEAR[2]}",
            SPEEDUP,
            "<loop> {s:.1f}x is nearest 10x",
            "<loop> {s:.1f}x is nearest 100x",
        ),
        "one_device_beside_fused": _s(
            "f_hi < p_lo and f_hi < s_lo",
            {
                "f": "fused_timing.median_per_step_ms.floor_1dev",
                "f_hi": "fused_timing.middle_half_per_step_ms.floor_1dev.1",
                "p": "fused_timing.median_per_step_ms.fused_psum",
                "p_lo": "fused_timing.middle_half_per_step_ms.fused_psum.0",
                "s": "fused_timing.median_per_step_ms.fused_stats",
                "s_lo": "fused_timing.middle_half_per_step_ms.fused_stats.0",
            },
            "The one-device loop ({f:.3g} ms per step, middle half up to {f_hi:.3g}) was faster than both four-device "
            "fused loops ({p:.3g} ms from {p_lo:.3g}, {s:.3g} ms from {s_lo:.3g}), beyond the spread. On this host it "
            "is the floor they do not reach.",
            "The one-device loop ({f:.3g} ms per step, middle half up to {f_hi:.3g}) was not clearly faster than "
            "both four-device fused loops ({p:.3g} ms from {p_lo:.3g}, {s:.3g} ms from {s_lo:.3g}). On this run the "
            "middle halves overlap or the four-device loops were faster.",
        ),
        "arithmetic_smallest": _s(
            f"{CLEAR} * p < min(w, c)",
            WAITING,
            "So, to the prediction, for the traced fused_stats loop: the collective and the waiting, each longer than "
            f"the program. The program time ({_PROGRAM}) is the smallest kind, {{p:.2f}} of {{b:.2f}} ms; waiting "
            f"({{w:.2f}} ms) and collective ({{c:.2f}} ms) each take more than {CLEAR}x it, the margin one capture "
            "allows.",
            "So, to the prediction, for the traced fused_stats loop: the program time "
            f"({_PROGRAM}) took {{p:.2f}} of {{b:.2f}} ms, and waiting ({{w:.2f}} ms) and collective ({{c:.2f}} ms) "
            f"do not both take more than {CLEAR}x it, the margin one capture allows.",
        ),
        "meeting_dominates": _s(
            f"w + c > {CLEAR} * p",
            WAITING,
            "So, to the prediction, for the traced fused_stats loop: the collective and the waiting together, not the "
            "program. Of {b:.2f} ms busy, waiting ({w:.2f} ms) and collective ({c:.2f} ms) together took <ratio>x "
            f"the program time ({_PROGRAM}, {{p:.2f}} ms). The waiting is a thread held at a rendezvous until every "
            "thread has arrived, however late each was started; the collective's own time may be copying and adding "
            "as much as synchronising.",
            "So, to the prediction, for the traced fused_stats loop: the collective and the waiting (waiting "
            f"{{w:.2f}} ms, collective {{c:.2f}} ms) together do not exceed the program time ({_PROGRAM}, {{p:.2f}} "
            "ms) by more than a quarter.",
        ),
        "program_dominates": _s(
            f"p > {CLEAR} * (w + c)",
            WAITING,
            "So, to the prediction, for the traced fused_stats loop: the program, not the collective and the waiting. "
            f"Program time ({_PROGRAM}) took {{p:.2f}} of {{b:.2f}} ms, more than waiting ({{w:.2f}} ms) and "
            "collective ({c:.2f} ms) together by more than a quarter.",
            "So, to the prediction, for the traced fused_stats loop: neither clearly. Program time "
            f"({_PROGRAM}) took {{p:.2f}} of {{b:.2f}} ms, within a quarter of waiting ({{w:.2f}} ms) and "
            "collective ({c:.2f} ms) together; one short capture has no spread to order them.",
        ),
        "course_against_roofline": _s(
            "q > 10",
            {
                "u": "roofline.points.course_update.measured_over_roofline",
                "p": "roofline.points.fused_psum.measured_over_roofline",
                "s": "roofline.points.fused_stats.measured_over_roofline",
                "q": "roofline.course_update_over_fused",
            },
            f"{_ROWS} The course update took {_U}x what its roofline allows, at most {{q:.0f}} times the larger "
            f"fused ratio ({_P}x, {_S}x): {_COPY} The course update pays one dispatch and wait per step, a fused "
            "loop one per K steps: that fixed cost per call is the likely excess.",
            f"{_ROWS} The course update took {_U}x what its roofline allows, {{q:.1f}} times the larger fused ratio "
            f"({_P}x, {_S}x), not more than ten times, and at most that: {_COPY} One dispatch per K steps did not "
            "bring a step much nearer its roofline.",
        ),
        "byte_roof_samples": _s(
            "hi <= 1.5 * lo",
            {
                "b": "roofline.roofs.gbytes_per_s",
                "lo": "roofline.roofs.gbytes_per_s_range.0",
                "hi": "roofline.roofs.gbytes_per_s_range.1",
            },
            "The memory roof, {b:.1f} GB/s, is what one device thread reached on that pass; its "
            "samples agree within 1.5x ({lo:.1f}–{hi:.1f} GB/s), so the host's load did not move it much while it "
            "was measured (a load that slowed every sample alike would not show here, and would lower the roof).",
            "The memory roof, {b:.1f} GB/s, is what one device thread reached on that pass; its "
            "samples spread over {lo:.1f}–{hi:.1f} GB/s, more than 1.5x: other work on this shared host slowed some "
            "passes, so this roof, and every ratio against it below, is that of a loaded host, not of its memory.",
        ),
        "fused_under_roofline": _s(
            "max(p, s) < 1",
            {
                "p": "roofline.points.fused_psum.measured_over_roofline",
                "s": "roofline.points.fused_stats.measured_over_roofline",
            },
            f"Both fused steps ran faster than their roofline ({_P}x, {_S}x): a measured time cannot beat a real "
            "roof, so XLA's byte count overstates what they move (see the note above the table).",
            f"The fused steps took {_P}x and {_S}x what their roofline allows.",
        ),
        "fused_over_roofline": _s(
            "min(p, s) >= 1.5 * d",
            {
                "p": "roofline.points.fused_psum.measured_over_roofline",
                "s": "roofline.points.fused_stats.measured_over_roofline",
                "p_d": "roofline.over_shared_roof.fused_psum",
                "s_d": "roofline.over_shared_roof.fused_stats",
                "d": "roofline.devices",
            },
            f"Both fused steps took {_P}x and {_S}x their roofline at one device's roofs, and still {{p_d:.1f}}x and "
            "{s_d:.1f}x against a roof {d}x lower, as {d} devices sharing the cores could make it: arithmetic and "
            "memory traffic, even at XLA's generous "
            "byte count, do not account for the rest of each step. This table does not time that rest; fixed cost "
            "(dispatch of small operations, the device threads' rendezvous) is the likely part.",
            f"One ran faster than its roofline and one did not ({_P}x, {_S}x): for the faster one XLA's byte "
            "count overstates what it moves (see the note above the table).",
        ),
        "fused_over_one_device_roof": _s(
            "min(p, s) >= 1.5",
            {
                "p": "roofline.points.fused_psum.measured_over_roofline",
                "s": "roofline.points.fused_stats.measured_over_roofline",
                "d": "roofline.devices",
            },
            f"Both fused steps took at least 1.5x the roofline of one device alone ({_P}x, {_S}x). The {{d}} devices "
            "share the cores, so their roof may be up to {d}x lower, and then at least one step would be within 1.5x "
            "of it: this table cannot say whether every fused step spends time beyond arithmetic and memory traffic.",
            f"One ran faster than its roofline and one did not ({_P}x, {_S}x): for the faster one XLA's byte "
            "count overstates what it moves (see the note above the table).",
        ),
        "fused_near_roofline": _s(
            "min(p, s) >= 1",
            {
                "p": "roofline.points.fused_psum.measured_over_roofline",
                "s": "roofline.points.fused_stats.measured_over_roofline",
                "d": "roofline.devices",
            },
            f"Both fused steps took at least the roofline of one device alone ({_P}x, {_S}x), one within 1.5x of it, "
            "which leaves little room for fixed cost; against a roof {d}x lower, as {d} devices sharing the cores "
            "could make it, that one could lie below its roof. As XLA's byte count can overstate traffic (see "
            "the note above the table), a ratio near 1 does not show it memory-bound either.",
            f"One ran faster than its roofline and one did not ({_P}x, {_S}x): for the faster one XLA's byte "
            "count overstates what it moves (see the note above the table).",
        ),
    },
    "stage5a_protocol": {
        "world_change_<world>_match": _s(
            "d == 0",
            {"d": "world_change.runs.<world>.max_weight_diff"},
            "bit for bit",
            "within float32 tolerance, not bit for bit (weights up to {d:.1e} apart)",
        ),
        "supervised_path_match": _s(
            "w == 0 and l == 0",
            {"w": "several_failures.max_weight_diff", "l": "several_failures.max_loss_diff"},
            "its losses and weights equal the control's bit for bit",
            "not bit for bit: its losses up to {l:.1e} and its weights up to {w:.1e} from the control's, within "
            "float32 tolerance",
        ),
        "uninterrupted_bitwise": _s(
            "l == 0 and w == 0",
            {"l": "uninterrupted.max_loss_diff", "w": "uninterrupted.max_weight_diff"},
            "The group matched the control bit for bit, losses and weights.",
            "Not bit for bit ({l:.1e} in a loss, {w:.1e} in a weight), though the ids are the control's. The likely "
            "cause, not measured here: the two processes' all-reduces add the same numbers in another order, and "
            "float32 addition depends on the order.",
        ),
        "supervised_goodput": _s(
            "s >= 0.5 * t",
            {
                "g": "several_failures.goodput.productive_fraction",
                "p": "several_failures.goodput.productive",
                "s": "several_failures.goodput.startup",
                "t": "several_failures.goodput.total",
            },
            "Goodput, the productive steps' share of the wall time: {g:.1%} ({p:.2f} of {t:.1f} s). Start-up took "
            "{s:.1f} s, most of it: a ten-step run on one host is mostly launching processes, not stepping.",
            "Goodput, the productive steps' share of the wall time: {g:.1%} ({p:.2f} of {t:.1f} s). Start-up took "
            "{s:.1f} s, less than half of it.",
        ),
        "skip_stop_time": _s(
            "abs(d - (t + p)) <= 2",
            {"d": "skipped_batch.detect_s", "t": "skipped_batch.timeout_s", "p": "skipped_batch.pulse_window_s"},
            "that stop is the bound ({t} s) plus the pulse check ({p} s): <gap> s away from their sum, inside the "
            "2 s allowed (a margin for a controller to report and exit)",
            "that stop is <gap> s away from the bound ({t} s) plus the pulse check ({p} s), beyond the 2 s allowed: "
            "the machine was slow to react",
        ),
    },
    "stage5b_scaling": {
        "save_and_publish_held": _s(
            "at + a + ap < st + s + sp",
            {
                "a": "async_vs_sync.spread.async.save_block_s.median_ms",
                "ap": "async_vs_sync.spread.async.publish_s.median_ms",
                "at": "async_vs_sync.spread.async.step_s.median_ms",
                "s": "async_vs_sync.spread.sync.save_block_s.median_ms",
                "sp": "async_vs_sync.spread.sync.publish_s.median_ms",
                "st": "async_vs_sync.spread.sync.step_s.median_ms",
            },
            "So, per step (a save every step), medians added, step + blocking save + publish: the synchronous group's "
            "loop was held {st:.1f} + {s:.1f} + {sp:.1f} = <sync> ms, the asynchronous group's {at:.1f} + {a:.1f} + "
            "{ap:.1f} = <async> ms (its publish at a later step): less in all with asynchronous saving, each sum "
            "counting its own group's step.",
            "So, per step (a save every step), medians added, step + blocking save + publish: the asynchronous "
            "group's loop was held {at:.1f} + {a:.1f} + {ap:.1f} = <async> ms (its publish at a later step), no less "
            "in all than the synchronous group's {st:.1f} + {s:.1f} + {sp:.1f} = <sync> ms.",
        ),
        "async_shortens_<what>": _s(
            "a_hi < s_lo",
            ASYNC_SPREAD,
            "Asynchronous saving shortened <label> beyond the spread: its middle half (q1–q3), {a_lo:.4g}–{a_hi:.4g} "
            "ms, ends below where the synchronous one, {s_lo:.4g}–{s_hi:.4g} ms, starts.",
            "Asynchronous saving did not shorten <label> beyond the spread.",
        ),
        "async_lengthens_<what>": _s(
            "a_lo > s_hi",
            ASYNC_SPREAD,
            "Asynchronous saving lengthened <label> beyond the spread: its middle half (q1–q3), {a_lo:.4g}–{a_hi:.4g} "
            "ms, starts above where the synchronous one, {s_lo:.4g}–{s_hi:.4g} ms, ends. A likely reason, not measured "
            "here: the background save shares the host's few cores with the steps.",
            "Overlap: no difference shown in <label>. The two middle halves (q1–q3) meet, so whatever separates the "
            "medians lies within the spread.",
        ),
        "efficiency_against_core_bound": _s(
            "e * w <= c",
            {"e": "efficiency.table.-1.efficiency", "c": "efficiency.usable_cores", "w": "efficiency.table.-1.devices"},
            "The bound: {c} usable cores let at most min(C, W) = <cap> of the {w} devices compute at once, so "
            "efficiency ≤ min(C, W)/W = <cap>/{w}; this run's {e:.3f} is no higher.",
            "Efficiency {e:.3f} at W = {w}, above the bound C / W = {c}/{w} that {c} usable cores allow when every "
            "device computes at the single device's speed: this run's one-device baseline was slower than that.",
        ),
        "one_usable_core": _s(
            "c < 2",
            SECOND_DEVICE,
            "With {c} usable core no two devices compute at once: the ceiling is 1/W at every W.",
            "",
        ),
        "second_device_gain": _s(
            "n2_lo > n1_hi",
            SECOND_DEVICE,
            "From W = 1 to W = {w2}, rows/s rose beyond the spread ({n1:.3g} to {n2:.3g}): a second device found "
            "compute the first left unused.",
            "Rows/s did not rise beyond the spread even from W = 1 to W = {w2} ({n1:.3g}, then {n2:.3g}), though {c} "
            "usable cores could run {w2} devices at once if one device's step used one core. How many cores one "
            "device's step used is not measured here. This run's efficiencies: {e2:.3f} at W = {w2}, {e:.3f} at "
            "W = {w}.",
        ),
        "efficiency_option_below": _s(
            "e_hi * w < 1",
            EFFICIENCY_OPTION,
            "So, to the prediction at W = {w}: below 1/{w}. The efficiency's whole middle-half range "
            "({e_lo:.3f}–{e_hi:.3f}) lies under 1/{w}, its upper end <margin>% below the line.",
            "The efficiency's middle-half range ({e_lo:.3f}–{e_hi:.3f}) is not wholly below 1/{w}.",
        ),
        "efficiency_option_near_share": _s(
            "e_lo * w >= 1 and e_hi * e_hi * w < 0.5",
            EFFICIENCY_OPTION,
            "So, to the prediction at W = {w}: near 1/{w}. The whole middle-half range ({e_lo:.3f}–{e_hi:.3f}) lies "
            "between 1/{w} and <low>, where 1/{w} and 0.5 meet on a log scale.",
            "The middle-half range ({e_lo:.3f}–{e_hi:.3f}) is not wholly between 1/{w} and <low>.",
        ),
        "efficiency_option_near_half": _s(
            "e_lo * e_lo * w >= 0.5 and e_hi * e_hi < 0.5",
            EFFICIENCY_OPTION,
            "So, to the prediction at W = {w}: near 0.5. The whole middle-half range ({e_lo:.3f}–{e_hi:.3f}) lies "
            "between <low> and <high>, where 0.5 meets 1/{w} and 1 on a log scale.",
            "The middle-half range ({e_lo:.3f}–{e_hi:.3f}) is not wholly between <low> and <high>.",
        ),
        "efficiency_option_near_one": _s(
            "e_lo * e_lo >= 0.5",
            EFFICIENCY_OPTION,
            "So, to the prediction at W = {w}: near 1. The whole middle-half range ({e_lo:.3f}–{e_hi:.3f}) lies "
            "above <high>, where 0.5 and 1 meet on a log scale.",
            "So, to the prediction at W = {w}: not to be told apart from these samples. The middle-half range "
            "({e_lo:.3f}–{e_hi:.3f}, median {e:.3f}) spans <spans>.",
        ),
        "throughput_fell_with_devices": _s(
            "nw_hi < n1_lo",
            THROUGHPUT,
            "Throughput fell from one device to {w}: {w} devices processed {nw:.3g} rows/s (middle half "
            "{nw_lo:.3g}–{nw_hi:.3g}) against {n1:.3g} on one ({n1_lo:.3g}–{n1_hi:.3g}), beyond the spread: the {w} "
            "devices together delivered less than one device alone.",
            "Throughput did not fall beyond the spread from one device to {w} ({w} devices {nw:.3g} rows/s, middle "
            "half {nw_lo:.3g}–{nw_hi:.3g}; one device {n1:.3g}, {n1_lo:.3g}–{n1_hi:.3g}).",
        ),
        "throughput_rose_with_devices": _s(
            "nw_lo > n1_hi",
            THROUGHPUT,
            "Throughput rose from one device to {w}: {w} devices processed {nw:.3g} rows/s (middle half "
            "{nw_lo:.3g}–{nw_hi:.3g}) against {n1:.3g} on one ({n1_lo:.3g}–{n1_hi:.3g}), beyond the spread. "
            "Efficiency {e:.3f} ({e_lo:.3f}–{e_hi:.3f} over the middle halves): 1 would be {w} times one device.",
            "Throughput did not change beyond the spread from one device to {w}: {w} devices processed {nw:.3g} "
            "rows/s (middle half {nw_lo:.3g}–{nw_hi:.3g}) against {n1:.3g} on one ({n1_lo:.3g}–{n1_hi:.3g}): "
            "whatever the added devices added is within the spread.",
        ),
        "throughput_last_step_rose": _s(
            "nw_lo > n2_hi",
            LAST_STEP,
            "From W = {w2} to W = {w}, rows/s rose beyond the spread ({n2:.3g} to {nw:.3g}; middle halves "
            "{n2_lo:.3g}–{n2_hi:.3g} and {nw_lo:.3g}–{nw_hi:.3g}).",
            "From W = {w2} to W = {w}, rows/s did not rise beyond the spread.",
        ),
        "throughput_last_step_fell": _s(
            "nw_hi < n2_lo",
            LAST_STEP,
            "From W = {w2} to W = {w}, rows/s fell again beyond the spread ({n2:.3g} to {nw:.3g}; middle halves "
            "{n2_lo:.3g}–{n2_hi:.3g} and {nw_lo:.3g}–{nw_hi:.3g}).",
            "From W = {w2} to W = {w}, rows/s moved within the spread ({n2:.3g}, then {nw:.3g}; middle halves "
            "{n2_lo:.3g}–{n2_hi:.3g} and {nw_lo:.3g}–{nw_hi:.3g}).",
        ),
        "tallest_other_phases": _s(  # "mostly" one phase only when it holds more than two thirds of the step
            "3 * p > 2 * o",
            {
                "p": "step_times.compiles.max_other_phase_ms",
                "q": "step_times.compiles.max_other_second_ms",
                "o": "step_times.compiles.max_other_ms",
            },
            "mostly <phase>: {p:.1f} of its {o:.1f} ms",
            "<phase> {p:.1f} ms and <second> {q:.1f} ms of its {o:.1f}",
        ),
        "tallest_other_on_peer": _s(  # one controller's slow step against the same step on its peer
            "2 * r >= o",
            {"r": "step_times.compiles.max_other_peer_ms", "o": "step_times.compiles.max_other_ms"},
            "On process <peer> the same step took {r:.1f} ms, at least half of that: each controller waits for the "
            "other inside a step, so a delay in either can show in both bars, and these records cannot say whose "
            "it was.",
            "Step <other> took {r:.1f} ms on process <peer>, under half as long: the delay did not reach its peer's "
            "bar.",
        ),
        "compile_steps_height": _s(
            "c > o",
            {"c": "step_times.compiles.min_compile_ms", "o": "step_times.compiles.max_other_ms"},
            "Steps <steps>, the first of each batch shape, are the tallest bars (at least {c:.1f} ms, every other "
            "step at most {o:.1f} ms): compilation, where the batch shapes predict it. The shapes are the evidence; "
            "that both controllers' bars are tall is not, as each waits for the other in the agreement or the "
            "psums. The tallest other bar, step <other> of process <process> (<phases>), is counted in the "
            "table above; these records do not name its cause.",
            "Steps <steps> compile (the first of each batch shape; at least {c:.1f} ms on both controllers), but "
            "another step took as long (step <other> of process <process>, <phases>): a one-off "
            "of this loaded machine, or an event these records do not name.",
        ),
        "compute_spread_reading": _s(
            "q1_slow > q3_fast",
            {
                "r": "step_times.compute_spread.ratio",
                "q1_slow": "step_times.compute_spread.slow_q1_ms",
                "q3_fast": "step_times.compute_spread.fast_q3_ms",
            },
            "Compute: process <slow>'s median is {r:.2f}× process <fast>'s, and the middle halves do not overlap "
            "(q1 above the other's q3): process <slow> computes longer in these steps.",
            "Compute: process <slow>'s median is {r:.2f}× process <fast>'s, but the middle halves overlap (q1 below "
            "the other's q3): compute does not separate the two.",
        ),
        "agreement_spread_reading": _s(
            "q1_wait > q3_late",
            {
                "r": "step_times.agreement_spread.ratio",
                "q1_wait": "step_times.agreement_spread.waits_q1_ms",
                "q3_late": "step_times.agreement_spread.late_q3_ms",
            },
            "Agreement: process <waits>'s median is {r:.2f}× process <late>'s, and the middle halves do not overlap "
            "(q1 above the other's q3): process <waits> waits there longer in these steps.",
            "Agreement: process <waits>'s median is {r:.2f}× process <late>'s, but the middle halves overlap (q1 "
            "below the other's q3): neither consistently waits for the other.",
        ),
        "straggler_none": _s(
            "q1_slow <= q3_fast and q1_wait <= q3_late",
            STRAGGLER,
            "So these few steps single out no straggler: one would show as its own longer compute or as its peer's "
            "longer wait in the agreement.",
            "So at least one phase separates the two processes beyond the spread.",
        ),
        "straggler_in_compute": _s(
            "q1_slow > q3_fast and q1_wait <= q3_late",
            STRAGGLER,
            "So the candidate straggler is process <slow>, in the compute phase. From a handful of steps that is a "
            "lead to follow with more steps, not yet a finding.",
            "So the compute phase alone does not single out a process.",
        ),
        "straggler_in_agreement": _s(
            "q1_slow <= q3_fast and q1_wait > q3_late",
            STRAGGLER,
            "So the candidate late peer is process <late>: process <waits> waits longer for it in the agreement "
            "phase. From a handful of steps this is a lead, not yet a finding.",
            "So the agreement phase alone does not single out a process.",
        ),
        "straggler_in_both": _s(
            "q1_slow > q3_fast and q1_wait > q3_late and ps == pl",
            STRAGGLER,
            "So both phases point at process <slow>: its own compute is longer beyond the spread and process <waits> "
            "waits for it in the agreement. From a handful of steps that is a lead to follow with more steps, not "
            "yet a finding.",
            "So both phases separate the two processes but point at different ones: process <slow> computes longer, "
            "yet process <waits> is the one that waits. These records name no single straggler.",
        ),
    },
}


def _filled(text: str, fill: dict) -> str:
    for name, value in fill.items():
        text = text.replace(f"<{name}>", str(value))
    return text


_KEYS: dict = {}  # claim name -> {value: results key}: table sentences chosen in this process, not yet filed


def _row(notebook: str, name: str, values: dict) -> Sentence:
    row = SENTENCES.get(notebook, {}).get(name)
    if row is None:
        raise UsageError(f"no sentence {name!r} for {notebook}; it has {sorted(SENTENCES.get(notebook, {}))}")
    missing = sorted(set(row.keys) - set(values))
    if missing:
        raise UsageError(f"sentence {name!r} needs the values {sorted(row.keys)}; missing {missing}")
    return row


def _keep(notebook: str, name: str, fill: dict | None, values: dict) -> tuple[str, bool]:
    """Choose the table sentence `name` for `values`, keep it with its keys for `record`; (text, whether it held)."""
    row, fill = _row(notebook, name, values), fill or {}
    used = {k: values[k] for k in row.keys}
    claim = _filled(name, fill)
    text = choose(claim, row.relation, used, true=_filled(row.true, fill), false=_filled(row.false, fill))
    _KEYS[claim] = {k: _filled(key, fill) for k, key in row.keys.items()}
    return text, holds(row.relation, used)


def throughput(efficiency: dict, cores: int, notebook: str = "stage5b_scaling") -> list[str]:
    """Stage 5b's reading of `scaling.weak`: how throughput moved from one device to the most, then the core bound."""
    one, last = efficiency["table"][0], efficiency["table"][-1]
    values = {"n1": one["rows_per_s"], "nw": last["rows_per_s"], "e": last["efficiency"], "w": last["devices"]}
    values.update(n1_lo=one["rows_per_s_middle_half"][0], n1_hi=one["rows_per_s_middle_half"][1])
    values.update(nw_lo=last["rows_per_s_middle_half"][0], nw_hi=last["rows_per_s_middle_half"][1])
    values.update(e_lo=last["efficiency_range"][0], e_hi=last["efficiency_range"][1])
    moved = chosen_first(notebook, ["throughput_fell_with_devices", "throughput_rose_with_devices"], **values)
    cap = {"cap": min(cores, last["devices"])}
    bound = chosen(notebook, "efficiency_against_core_bound", cap, e=last["efficiency"], c=cores, w=last["devices"])
    if len(efficiency["table"]) < 3:  # no W between one device and the most
        return [moved, bound]
    two = efficiency["table"][1]
    values = {"n1": one["rows_per_s"], "n1_hi": one["rows_per_s_middle_half"][1], "n2": two["rows_per_s"]}
    values.update(n2_lo=two["rows_per_s_middle_half"][0], w2=two["devices"], e2=two["efficiency"], c=cores)
    gain = chosen_first(
        notebook, ["one_usable_core", "second_device_gain"], e=last["efficiency"], w=last["devices"], **values
    )
    before = efficiency["table"][-2]
    values = {"n2": before["rows_per_s"], "nw": last["rows_per_s"], "w2": before["devices"], "w": last["devices"]}
    values.update(n2_lo=before["rows_per_s_middle_half"][0], n2_hi=before["rows_per_s_middle_half"][1])
    values.update(nw_lo=last["rows_per_s_middle_half"][0], nw_hi=last["rows_per_s_middle_half"][1])
    step = chosen_first(notebook, ["throughput_last_step_rose", "throughput_last_step_fell"], **values)
    return [moved, step, bound, gain]


def efficiency_option(efficiency: dict, notebook: str = "stage5b_scaling") -> str:
    """Stage 5b's close of its prediction at the largest W: below 1/W, near 1/W, near 0.5 or near 1 (options met at
    their geometric means), chosen from the middle-half range; not told apart when the range crosses a line."""
    last = efficiency["table"][-1]
    low, high = last["efficiency_range"]
    w = last["devices"]
    lines = (1 / w, (0.5 / w) ** 0.5, 0.5**0.5)  # where neighbouring options meet, below 1/W first
    options = (f"below 1/{w}", f"near 1/{w}", "near 0.5", "near 1")
    touched = [o for k, o in enumerate(options) if (k == 0 or high >= lines[k - 1]) and (k == 3 or low < lines[k])]
    spans = ", ".join(touched[:-1]) + f" and {touched[-1]}" if len(touched) > 1 else touched[0]
    fill = {
        "low": f"{lines[1]:.3f}",
        "high": f"{lines[2]:.3f}",
        "spans": spans,
        "margin": f"{100 * (1 - high * w):.0f}",
    }
    values = {"e": last["efficiency"], "e_lo": low, "e_hi": high, "w": w, "c": efficiency["usable_cores"]}
    names = ["efficiency_option_below", "efficiency_option_near_share", "efficiency_option_near_half"]
    return chosen_first(notebook, [*names, "efficiency_option_near_one"], fill, **values)


def world_match(world: str, max_weight_diff: float, notebook: str = "stage5a_protocol") -> str:
    """Stage 5a: whether a restart on another world size matched the control bit for bit."""
    return chosen(notebook, "world_change_<world>_match", {"world": world}, d=max_weight_diff)


def supervised_match(path: dict, notebook: str = "stage5a_protocol") -> str:
    """Stage 5a: whether drill 1's joined attempts matched the control bit for bit, with both largest gaps if not."""
    return chosen(notebook, "supervised_path_match", w=path["max_weight_diff"], l=path["max_loss_diff"])


def supervised_goodput(ledger: dict, notebook: str = "stage5a_protocol") -> str:
    """Stage 5a: drill 1's goodput (productive share of the wall time) and how much of the wall time start-up took."""
    values = {"g": ledger["productive_fraction"], "p": ledger["productive"], "s": ledger["startup"]}
    return chosen(notebook, "supervised_goodput", **values, t=ledger["total"])


def uninterrupted_match(against: dict, notebook: str = "stage5a_protocol") -> str:
    """Stage 5a: whether the group with no fault matched the control bit for bit, and why not if it did not."""
    return chosen(notebook, "uninterrupted_bitwise", l=against["max_loss_diff"], w=against["max_weight_diff"])


def skip_stop(detect_s: float, timeout_s: float, pulse_s: float, notebook: str = "stage5a_protocol") -> str:
    """Stage 5a: the stop after a skipped batch against the bounded wait plus the pulse check."""
    fill = {"gap": f"{abs(detect_s - (timeout_s + pulse_s)):.2f}"}
    return chosen(notebook, "skip_stop_time", fill, d=detect_s, t=timeout_s, p=pulse_s)


def roofline(points: dict, devices: int, notebook: str = "stage4b_beyond") -> list[str]:
    """Stage 4b's reading of the roofline table: the course update against the fused steps, then the fused steps,
    whose `devices` share the cores one device's roofs were measured on."""
    names = {"u": "course_update", "p": "fused_psum", "s": "fused_stats"}
    over = {k: points[name]["measured_over_roofline"] for k, name in names.items()}
    said = [chosen(notebook, "course_against_roofline", q=roofline_gap(points), **over)]
    names = ["fused_under_roofline", "fused_over_roofline", "fused_over_one_device_roof", "fused_near_roofline"]
    shared = over_shared_roof(points, devices)  # each fused ratio against a roof `devices` times lower
    values = {"p": over["p"], "s": over["s"], "p_d": shared["fused_psum"], "s_d": shared["fused_stats"]}
    said.append(chosen_first(notebook, names, **values, d=devices))
    return said


def nearest_option(speedups: dict, half: dict | None = None, notebook: str = "stage4b_beyond") -> str:
    """Stage 4b's close of its prediction: which of 2x, 10x and 100x each loop's speedup is nearest, in log ratio.

    Given the middle halves per step (`half`, with the course loop's), a loop whose speedup range (the course's
    quartiles over the loop's, lowest to highest) crosses where two options meet is not given either.
    """
    loops = ("fused_psum", "fused_stats", "floor_1dev")
    low, high = (NEAR[0] * NEAR[1]) ** 0.5, (NEAR[1] * NEAR[2]) ** 0.5
    said = []
    for loop in loops:
        if half is None:
            said.append(chosen_first(notebook, NEAREST, {"loop": loop}, s=speedups[loop]))
            continue
        (c_lo, c_hi), (l_lo, l_hi) = half["course_loop"], half[loop]
        lo, hi = c_lo / l_hi, c_hi / l_lo
        met = [f"{a} and {b}" for a, b, line in (("2x", "10x", low), ("10x", "100x", high)) if lo < line < hi]
        fill = {"loop": loop, "lo": f"{lo:.3g}", "hi": f"{hi:.3g}", "spans": ", and where ".join(met) or "no options"}
        names = [NEAREST[0], "speedup_spread_crosses_<loop>", *NEAREST[1:]]
        values = {"s": speedups[loop], "c_lo": c_lo, "c_hi": c_hi, "l_lo": l_lo, "l_hi": l_hi}
        said.append(chosen_first(notebook, names, fill, **values))
    opening = f"So, to the prediction, on a log scale (the options meet at {low:.1f}x and {high:.1f}x)"
    if half is not None:
        opening += (
            "; a loop is named for one option only if its speedup range stays on one side of where they meet "
            "(the range: the course loop's middle half divided by the loop's)"
        )
    return f"{opening}: {'; '.join(said)}."


def stats_beside_psum(per_step: dict, half: dict, notebook: str = "stage4b_beyond") -> str:
    """Stage 4b: whether fused_stats' one collective per dispatch made a step faster than fused_psum's one per step,
    read with both middle halves (faster, slower, or neither beyond the spread)."""
    values = {"s": per_step["fused_stats"], "s_lo": half["fused_stats"][0], "s_hi": half["fused_stats"][1]}
    values.update(p=per_step["fused_psum"], p_lo=half["fused_psum"][0], p_hi=half["fused_psum"][1])
    return chosen_first(notebook, ["stats_faster_than_psum", "stats_slower_than_psum"], **values)


def one_device_beside_fused(per_step: dict, half: dict, notebook: str = "stage4b_beyond") -> str:
    """Stage 4b's sentence on the one-device fused loop beside the two four-device fused loops, with their spreads."""
    values = {"f": per_step["floor_1dev"], "f_hi": half["floor_1dev"][1], "p": per_step["fused_psum"]}
    values.update(p_lo=half["fused_psum"][0], s=per_step["fused_stats"], s_lo=half["fused_stats"][0])
    return chosen(notebook, "one_device_beside_fused", **values)


def arithmetic_share(split: dict, notebook: str = "stage4b_beyond") -> str:
    """Stage 4b's answer to the prediction, for the traced capture: is the program's own time (the arithmetic) the
    smallest part, are the collective and the waiting together longer by more than a quarter, or neither?"""
    values = {"w": split["waiting_ms"], "c": split["collective_ms"], "p": split["program_ms"], "b": split["busy_ms"]}
    names = ["arithmetic_smallest", "meeting_dominates", "program_dominates"]
    ratio = (values["w"] + values["c"]) / values["p"] if values["p"] > 0 else float("inf")
    return chosen_first(notebook, names, {"ratio": f"{ratio:.1f}"}, **values)


def async_saves(saves: dict, notebook: str = "stage5b_scaling") -> list[str]:
    """Stage 5b's reading of the async and sync groups: the blocking save and the step, shorter, longer or neither."""
    said = []
    for what, label in (("save_block", "the blocking save"), ("step", "the step")):
        a, b = saves["async"][f"{what}_s"], saves["sync"][f"{what}_s"]
        values = {"a": a["median_ms"], "a_lo": a["q1_ms"], "a_hi": a["q3_ms"]}
        values.update(s=b["median_ms"], s_lo=b["q1_ms"], s_hi=b["q3_ms"])
        names = ["async_shortens_<what>", "async_lengthens_<what>"]
        said.append(chosen_first(notebook, names, {"what": what, "label": label}, **values))
    return said


def save_and_publish(saves: dict, notebook: str = "stage5b_scaling") -> str:
    """Stage 5b: how long each group's loop was held per save, the blocking save and the publish added."""
    values = {"a": saves["async"]["save_block_s"]["median_ms"], "ap": saves["async"]["publish_s"]["median_ms"]}
    values.update(s=saves["sync"]["save_block_s"]["median_ms"], sp=saves["sync"]["publish_s"]["median_ms"])
    values.update(at=saves["async"]["step_s"]["median_ms"], st=saves["sync"]["step_s"]["median_ms"])
    fill = {
        "sync": f"{values['st'] + values['s'] + values['sp']:.1f}",
        "async": f"{values['at'] + values['a'] + values['ap']:.1f}",
    }
    return chosen(notebook, "save_and_publish_held", fill, **values)


def step_phases(compiles: dict, steps: str, slow: dict, fast: dict, waits: dict, late: dict, notebook=None) -> list:
    """Stage 5b's reading of the per-controller step records: compilation, then compute and agreement spreads."""
    notebook = notebook or "stage5b_scaling"
    fill = {k: compiles[f"max_other_{k}"] for k in ("other", "process", "phase", "second")}
    values = {"p": compiles["max_other_phase_ms"], "q": compiles["max_other_second_ms"], "o": compiles["max_other_ms"]}
    fill = {"steps": steps, **fill, "phases": chosen(notebook, "tallest_other_phases", fill, **values)}
    said = [chosen(notebook, "compile_steps_height", fill, c=compiles["min_compile_ms"], o=compiles["max_other_ms"])]
    if "max_other_peer_ms" in compiles:  # the same step on the other controller, when there is one
        fill = {"other": compiles["max_other_other"], "peer": compiles["max_other_peer"]}
        values = {"r": compiles["max_other_peer_ms"], "o": compiles["max_other_ms"]}
        said[0] += " " + chosen(notebook, "tallest_other_on_peer", fill, **values)
    ratio = slow["median_ms"] / fast["median_ms"]  # from the unrounded medians, rounded once where it is shown
    fill = {"slow": slow["process"], "fast": fast["process"]}
    said.append(chosen(notebook, "compute_spread_reading", fill, r=ratio, q1_slow=slow["q1_ms"], q3_fast=fast["q3_ms"]))
    ratio = waits["median_ms"] / late["median_ms"]
    fill = {"waits": waits["process"], "late": late["process"]}
    values = {"r": ratio, "q1_wait": waits["q1_ms"], "q3_late": late["q3_ms"]}
    said.append(chosen(notebook, "agreement_spread_reading", fill, **values))
    values = {"q1_slow": slow["q1_ms"], "q3_fast": fast["q3_ms"], "q1_wait": waits["q1_ms"], "q3_late": late["q3_ms"]}
    values.update(ps=slow["process"], pl=late["process"])
    fill = {"slow": slow["process"], "waits": waits["process"], "late": late["process"]}
    said.append(chosen_first(notebook, STRAGGLER_NAMES, fill, **values))
    return said


STRAGGLER_NAMES = ["straggler_none", "straggler_in_compute", "straggler_in_agreement", "straggler_in_both"]


def chosen_first(notebook: str, names, fill: dict | None = None, **values) -> str:
    """The first sentence of `names` whose relation holds for `values` (each tried is kept), else the last's other.

    One wording per outcome of a comparison with more than two (shorter / longer / within the spread):
    every row is tried in order until one holds; the last row's second sentence covers the rest.
    """
    text = ""
    for name in names:
        text, held = _keep(notebook, name, fill, values)
        if held:
            break
    return text


def record(out_dir: str, notebook: str, keys: dict | None = None, *, partial: bool = False) -> None:
    """File every sentence chosen in this process: table sentences with the table's keys, others with `keys`.

    The closing cell's call; what it files, tests/test_claims.py re-checks against the recorded results.
    """
    table = {name: _KEYS.pop(name) for name in list(_KEYS)}
    claims.record(out_dir, notebook, {**table, **(keys or {})}, partial=partial)


def fault_ranking(errors: dict, original: dict | None = None, notebook: str = "stage3a_checkpoint") -> str:
    """Stage 3a's sentence on how two fixtures rank the same three faults ({fixture: {fault: final-weight error}});
    given the original course's errors of the same fixtures and faults, one more sentence per fixture says whether
    this run keeps the original's order."""
    faults = {tuple(sorted(e)) for e in errors.values()}
    if len(errors) != 2 or len(faults) != 1 or len(next(iter(faults))) != 3:
        raise UsageError(f"the fault ranking compares two fixtures with the same three faults, not {errors!r}")
    (a, first), (b, second) = errors.items()
    x, y, z = sorted(first, key=lambda fault: -first[fault])  # fixture a's order, largest error first
    values = {f"{v}_{s}": float(e[f]) for s, e in (("a", first), ("b", second)) for v, f in zip("xyz", (x, y, z))}
    said = [chosen_first(notebook, FAULT_RANKING, {"a": a, "b": b, "x": x, "y": y, "z": z}, **values)]
    if original is not None:
        if sorted(original) != sorted(errors) or any(sorted(original[s]) != sorted(errors[s]) for s in errors):
            raise UsageError(f"the original course's errors name other fixtures or faults: {original!r}")
        for s, found in errors.items():
            p, q, r = sorted(original[s], key=lambda fault: -original[s][fault])  # the original's order
            fill = {"s": s, "p": p, "q": q, "r": r}
            kept = {v: float(found[f]) for v, f in (("p", p), ("q", q), ("r", r))}
            said.append(chosen(notebook, "fault_order_as_original_<s>", fill, **kept))
    return "\n".join(said)


def timing_order(timing: dict, notebook: str = "stage4a_profile") -> str:
    """Stage 4a's sentence on the order of the three warm medians, read with their middle halves, then their ratios."""
    c4, c1 = timing["compiled_4dev"], timing["compiled_1dev"]
    values = {"e": timing["eager_4dev"]["median_ms"], "c4": c4["median_ms"], "c4_lo": c4["q1_ms"]}
    values.update(c4_hi=c4["q3_ms"], c1=c1["median_ms"], c1_hi=c1["q3_ms"], e_lo=timing["eager_4dev"]["q1_ms"])
    values.update(
        r=timing["ratios"]["compiled_4dev_over_compiled_1dev"], re=timing["ratios"]["eager_4dev_over_compiled_4dev"]
    )
    values["rc"] = timing["ratios"]["eager_4dev_less_compile_over_compiled_4dev"]  # each call's compiling taken off
    return chosen_first(notebook, ["timing_order", "timing_eager_clear"], **values)


def dominance(dominant: dict, cpus: int, notebook: str = "stage4a_profile") -> list[str]:
    """Stage 4a's sentences on the first trace (`evidence.trace.dominant`): which annotation is longer, read with
    both middle halves, then the durations beyond twice their median, named."""
    said = chosen_first(notebook, DOMINANCE_NAMES, **_dominance_values(dominant))
    listed = ", ".join(
        f"transition {o['transition']}'s {o['annotation']} {o['ms']:.3f} ms (median {o['median_ms']:.3f})"
        for o in dominant["outliers"]
    )
    fill = {"listed": listed[:1].upper() + listed[1:]}
    return [said, chosen(notebook, "trace_outliers", fill, o=dominant["outlier_count"], c=cpus)]


def example_target(dominant: dict, notebook: str = "stage4a_profile") -> str:
    """Stage 4a's sentence on why the worked example shortens prepare_and_place, read from the first trace."""
    return chosen_first(notebook, EXAMPLE_TARGET_NAMES, **_dominance_values(dominant))


def _dominance_values(dominant: dict) -> dict:
    values = {}
    for short, name in (("p", "prepare_and_place"), ("u", "compiled_update_and_wait")):
        values.update({short: dominant[f"median_{name}_ms"], f"{short}_lo": dominant[f"q1_{name}_ms"]})
        values[f"{short}_hi"] = dominant[f"q3_{name}_ms"]
    return {**values, "k": dominant["prepare_longer_in"], "n": dominant["transitions"]}


def example_calls(tiny_ms: list, notebook: str = "stage4a_profile") -> str:
    """Stage 4a's sentence on section 2's small capture: the fastest and slowest call of one compiled function."""
    return chosen(notebook, "example_calls", lo=min(tiny_ms), hi=max(tiny_ms))


def capture_drift(outcome: dict, notebook: str = "stage4a_profile") -> str:
    """Stage 4a's sentence setting the unchanged target's move between the two captures beside the cut."""
    b, r, c = outcome["baseline_first_ms"], outcome["reach_ms"], outcome["cut_ms"]
    return chosen(notebook, "capture_drift", b=b, r=r, c=c)


def verdict(outcome: dict, verdict_of: str, notebook: str = "stage4a_profile") -> str:
    """Stage 4a's verdict on the effect (`evidence.hypothesis.judge`): the first sentence of VERDICT that holds."""
    control = outcome["sides"]["control"]
    values = {"c": outcome["cut_ms"], "n": outcome["noise_ms"], "d": outcome["control_drift_ms"]}
    values.update(m=outcome["margin_ms"], s=outcome["spread_ms"], r=outcome["reach_ms"], t=outcome["threshold_ms"])
    values.update(u_lo=control["unchanged"]["q1_ms"], u_hi=control["unchanged"]["q3_ms"])
    values.update(g_lo=control["changed"]["q1_ms"], g_hi=control["changed"]["q3_ms"], b=outcome["baseline_first_ms"])
    return chosen_first(notebook, VERDICT, {"verdict_of": f"{verdict_of} on the effect"}, **values)


def mechanism(outcome: dict, verdict_of: str, notebook: str = "stage4a_profile") -> list[str]:
    """Stage 4a's verdict on the mechanism (supported, not supported, not shown) and where most of the cut went,
    for a target split into parts; for a whole target, one line saying the mechanism is not judged apart."""
    if "mechanism" not in outcome:
        return [f"{verdict_of} on the mechanism: not judged apart; {outcome['target']} is not split into parts here."]
    fill = {"verdict_of": f"{verdict_of} on the mechanism", "part": outcome["mechanism"]}
    fill["rest"] = " + ".join(list(outcome["parts"])[1:])
    unchanged, changed = outcome["mechanism_sides"]["unchanged"], outcome["mechanism_sides"]["changed"]
    values = {"f": outcome["mechanism_fall_ms"], "o": outcome["rest_fall_ms"], "t": outcome["threshold_ms"]}
    values.update(c=outcome["cut_ms"], n=outcome["noise_ms"], mu_lo=unchanged["q1_ms"], mu_hi=unchanged["q3_ms"])
    values.update(mg_lo=changed["q1_ms"], mg_hi=changed["q3_ms"], mu=unchanged["median_ms"], mg=changed["median_ms"])
    said = chosen_first(notebook, MECHANISM_NAMES, fill, **values)
    return [said, chosen(notebook, "cut_mostly_elsewhere", fill, **values)]


MECHANISM_NAMES = ["mechanism_supported", "mechanism_not_supported", "mechanism_beyond_its_part", "mechanism_not_shown"]


# --- stages 1-3: the sentences a reveal cell prints, kept here so its source does not give the answer away -----
# name -> (relation over the cell's values, sentence if it holds, sentence if not); `chosen` picks one through
# `claims.choose`, and the notebook's closing cell files it with its results keys (`claims.record`).

CHOSEN = {
    "stage1_batches": {
        "key_changes_at_epoch_start": (
            "count == epochs - 1 and first == start",
            "observed: over the {epochs} epochs walked, the key changed at batch {first} and nowhere but where a "
            "new epoch began: lazily, the call that found the order used up drew the next permutation.",
            "observed: the key first changed at batch {first}, while the second epoch starts at batch {start}: "
            "eagerly, this sampler draws the next permutation as soon as the order is used up, one call early.",
        ),
    },
    "stage2_update": {
        "sum_of_local_means_grows": (
            "n1 < n2 < n4",
            "NumPy, the same slots cut into 1, 2 and 4 blocks: adding the blocks' local means instead of their "
            "numerators, the gradient's norm grows with the number of blocks: {n1:.3g} for 1 block, {n2:.3g} for 2, "
            "{n4:.3g} for 4 (the global mean gradient's: {g:.3g}).",
            "NumPy, the same slots cut into 1, 2 and 4 blocks: adding the blocks' local means instead of their "
            "numerators gives a gradient of norm {n1:.3g} for 1 block, {n2:.3g} for 2, {n4:.3g} for 4 (the global "
            "mean gradient's: {g:.3g}): on this batch it does not grow at every step.",
        ),
        "compiled_merges_all_reduces": (
            "compiled < lowered",
            "XLA merged collectives here, on this CPU backend: the compiled program holds fewer all-reduces "
            "({compiled}) than the lowered one asked for ({lowered}); another backend may compile them otherwise.",
            "XLA did not merge these collectives here, on this CPU backend: the compiled program holds {compiled} "
            "all-reduce(s), the lowered one {lowered}.",
        ),
    },
    "stage3c_orbax_lesson": {
        "publish_uses_both_marks": (
            "renamed == 1 and marker_last == 1 and early == 0",
            "Both, in this version: Orbax wrote into bare-orbax.orbax-checkpoint-tmp, commit_success.txt was the "
            "last write the trace saw there, and nothing touched bare-orbax until one rename gave the folder its "
            "final name. So no operation the hook saw used the name bare-orbax before that rename. The listing's other "
            "entries, _sharding and the six field folders with the arrays' chunks, are not in the trace: TensorStore "
            "wrote them outside Python, so when and where they were written is not shown here.",
            "Not both marks in the order the question describes: in this trace, the folder got its final name by a "
            "rename: {renamed} (1 = yes); commit_success.txt was the last write before it, in the temporary folder: "
            "{marker_last}; operations under the final name before that: {early}. The trace above is this version's "
            "answer.",
        ),
        "async_save_counts_after_wait": (
            "final_at_return == 0",
            "A stop between the two listings would have left no async-orbax checkpoint to resume from (only the "
            "checkpoints saved before it): the save counts only once wait_until_finished() returns, or once the "
            "folder carries the mark of a finished checkpoint (the rule above).",
            "This run, async-orbax already had its final name when save returned; nothing promises that (a larger "
            "state or a slower disk), so the save counts only once wait_until_finished() returns, or once the folder "
            "carries the mark of a finished checkpoint (the rule above).",
        ),
    },
}


def chosen(notebook: str, name: str, fill: dict | None = None, **values) -> str:
    """The sentence `name` of `notebook` for `values`, kept until the closing cell files it.

    A row of SENTENCES (stages 4 and 5) is filed by `record` with the table's results keys; a row of
    CHOSEN (stages 1-3) by `claims.record` with the keys the closing cell names.
    """
    if name in SENTENCES.get(notebook, {}):
        return _keep(notebook, name, fill, values)[0]
    row = CHOSEN.get(notebook, {}).get(name)
    if row is None:
        known = sorted(CHOSEN.get(notebook, {})) + sorted(SENTENCES.get(notebook, {}))
        raise UsageError(f"no chosen sentence {name!r} for {notebook}; it has {known}")
    relation, true, false = row
    return choose(name, relation, values, true=true, false=false)
