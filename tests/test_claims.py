"""Every sentence a notebook states about a measured value is true of the run that printed it.

The notebooks choose such sentences with shardlab.course.claims.choose (directly or through the
table in shardlab.course.sentences), and their closing cell records each claim with the results keys
its values came from. Here every recorded claim of the course run is re-checked:
each value is looked up under its key in the notebook's results file (so the sentence rests on the
number the notebook recorded, not on a copy), the relation is evaluated again, and the printed text
must be the sentence for that outcome. Planted false claims show the check can fail.
"""

import ast
import math
import re
import statistics

import numpy as np
import pytest
from conftest import REPO, results

from shardlab.course import catalog, claims, drill_records, orbax_lesson, sentences, show
from shardlab.course import results as record
from shardlab.errors import UsageError
from shardlab.evidence import hypothesis, trace
from shardlab.perf import profile, roofline

pytestmark = pytest.mark.notebooks


def lookup(found: dict, key: str):
    """The value under a dotted results key ("timing.median_ms", "rows.2.loss"), read here, not by the code under
    test; KeyError naming the key if absent."""
    value = found
    for part in key.split("."):
        if isinstance(value, list) and part.lstrip("-").isdigit():
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise KeyError(f"results key {key!r}: no {part!r}")
    return value


def check_claims(found: dict) -> list[str]:
    """Every way the recorded claims of one notebook's results disagree with the values they name."""
    problems = []
    for name, claim in found.get(claims.CLAIMS, {}).items():
        values = {}
        for var, key in claim["keys"].items():
            try:
                values[var] = lookup(found, key)
            except KeyError as exc:
                problems.append(f"{name}: {exc}")
                continue
            recorded = claim["values"][var]
            if isinstance(recorded, float) and not math.isclose(recorded, values[var], rel_tol=1e-12, abs_tol=0):
                problems.append(f"{name}: {var} = {recorded} but {key} records {values[var]}")
            elif not isinstance(recorded, float) and recorded != values[var]:
                problems.append(f"{name}: {var} = {recorded!r} but {key} records {values[var]!r}")
        if len(values) == len(claim["keys"]):
            truth = claims.holds(claim["relation"], values)
            said = claim["holds"]
            if truth != said:
                problems.append(f"{name}: {claim['relation']} is {truth} for {values}, the notebook said {said}")
            elif claim["text"] != claim["sentences"][str(truth).lower()].format(**values):
                problems.append(f"{name}: the text shown is not the sentence for {claim['relation']} = {truth}")
    return problems


@pytest.fixture(autouse=True)
def _no_sentence_pending(monkeypatch):
    """Each test files only the sentences it chose: none left pending by a test before it in this process."""
    monkeypatch.setattr(sentences, "_KEYS", {})


def filed(tmp_path, notebook: str, recorded: dict, whole: bool = False, keys: dict | None = None) -> dict:
    """`notebook`'s results once `recorded` ({name: value}) is recorded under tmp_path and the sentences chosen since
    are filed as its closing cell files them (every one when `whole`; the stage 1-3 claims `keys` names with those
    keys), each filed claim asserted true of the recorded values."""
    for name, value in recorded.items():
        record.emit(str(tmp_path), notebook, name, value, shown=False)
    if keys is not None:
        claims.record(str(tmp_path), notebook, keys)
    else:
        sentences.record(str(tmp_path), notebook, partial=not whole)
    found = record.load(str(tmp_path), notebook)
    assert not check_claims(found), check_claims(found)
    return found


def test_relations_follow_their_grammar():
    assert claims.holds("a < b", {"a": 1.0, "b": 2.0})
    assert not claims.holds("a < 0.5 * b and b > 0", {"a": 1.5, "b": 2.0})
    assert claims.holds("abs(a - b) <= c or not d", {"a": 1, "b": 3, "c": 1, "d": False})
    assert claims.holds("0 < a <= 1", {"a": 1})
    for bad in ("__import__('os')", "a.b < 1", "a <", "c < 1"):
        with pytest.raises(UsageError):
            claims.holds(bad, {"a": 1})


def test_a_planted_false_claim_is_found():
    found = {"async_ms": 7.0, "sync_ms": 10.0, "timing": {"median_ms": [3.0, 4.0]}}
    good = {
        "relation": "a < b",
        "keys": {"a": "async_ms", "b": "sync_ms"},
        "values": {"a": 7.0, "b": 10.0},
        "sentences": {"true": "faster", "false": "not faster"},
    }
    found[claims.CLAIMS] = {
        "faster": {**good, "holds": True, "text": "faster"},
        "says_slower": {**good, "holds": False, "text": "not faster"},  # the sentence the numbers contradict
        "copied_value": {**good, "values": {"a": 7.5, "b": 10.0}, "holds": True, "text": "faster"},
        "no_such_key": {**good, "keys": {"a": "missing", "b": "sync_ms"}, "holds": True, "text": "faster"},
        "wrong_text": {**good, "holds": True, "text": "not faster"},  # outcome right, the other sentence shown
        "dotted": {
            "relation": "a < b",
            "keys": {"a": "timing.median_ms.0", "b": "timing.median_ms.1"},
            "values": {"a": 3.0, "b": 4.0},
            "holds": True,
            "sentences": {"true": "{a} before {b}", "false": "{b} before {a}"},
            "text": "3.0 before 4.0",
        },
    }
    problems = check_claims(found)
    flagged = sorted({p.split(":")[0] for p in problems})
    assert flagged == ["copied_value", "no_such_key", "says_slower", "wrong_text"], problems


def test_choose_keeps_the_wording_in_the_cell_and_record_files_it_with_its_keys(tmp_path):
    record.emit(str(tmp_path), "nb", "timing", {"async_ms": 12.0, "sync_ms": 10.0}, shown=False)
    text = claims.choose("faster", "a < b", {"a": 12.0, "b": 10.0}, true="faster ({a})", false="not faster ({a})")
    assert text == "not faster (12.0)"
    with pytest.raises(UsageError):  # a chosen sentence must be filed with the key of every value it used
        claims.record(str(tmp_path), "nb", {"faster": {"a": "timing.async_ms"}})
    with pytest.raises(UsageError):  # and nothing is filed that was never chosen
        claims.record(str(tmp_path), "nb", {"faster": {"a": "timing.async_ms", "b": "timing.sync_ms"}, "other": {}})
    claims.record(str(tmp_path), "nb", {"faster": {"a": "timing.async_ms", "b": "timing.sync_ms"}})
    found = record.load(str(tmp_path), "nb")
    assert found[claims.CLAIMS]["faster"]["holds"] is False and not check_claims(found)
    found["timing"]["async_ms"] = 9.0  # the number under the key no longer says what the sentence rests on
    assert check_claims(found)
    with pytest.raises(UsageError):  # filed once: a second record finds nothing chosen for these keys
        claims.record(str(tmp_path), "nb", {"faster": {"a": "timing.async_ms", "b": "timing.sync_ms"}})


@pytest.mark.parametrize("name", catalog.NOTEBOOKS)
def test_every_claim_of_the_course_run_is_true(run_dir, name):
    found = results(run_dir, name)
    problems = check_claims(found)
    assert not problems, f"{name}: " + "; ".join(problems)


def test_a_sentence_of_the_table_is_recorded_as_a_claim_the_check_accepts(tmp_path):
    recorded = {"world_change": {"runs": {"1x2": {"max_weight_diff": 0.0}}}}
    text, found = _said(tmp_path, "stage5a_protocol", recorded, ["world_change_<world>_match"], {"world": "1x2"}, d=0.0)
    assert text == "bit for bit"
    claim = found[claims.CLAIMS]["world_change_1x2_match"]
    assert claim["keys"] == {"d": "world_change.runs.1x2.max_weight_diff"}
    found["world_change"]["runs"]["1x2"]["max_weight_diff"] = 1e-7  # the recorded value no longer says "bit for bit"
    assert check_claims(found)
    with pytest.raises(UsageError, match="missing"):
        sentences.chosen_first("stage5a_protocol", ["skip_stop_time"], d=1.0)
    with pytest.raises(UsageError, match="no sentence"):
        sentences.chosen_first("stage5a_protocol", ["faster"])


def test_every_sentence_of_the_table_names_a_value_for_each_name_its_relation_uses():
    for notebook, rows in sentences.SENTENCES.items():
        for name, row in rows.items():
            used = {n.id for n in ast.walk(ast.parse(row.relation, mode="eval")) if isinstance(n, ast.Name)}
            assert used - {"abs", "min", "max"} <= set(row.keys), (notebook, name)
            for text in (row.true, row.false):  # every value a sentence formats is one the claim records
                fields = set(re.findall(r"\{(\w+)(?::[^}]*)?\}", text))
                assert fields <= set(row.keys), (notebook, name, fields)


# --- planted values: a comparison is judged with its spread, and each outcome has its own wording ---------------


def _said(tmp_path, notebook: str, recorded: dict, names, fill=None, **values) -> tuple[str, dict]:
    """The sentence chosen for `values` and filed (values recorded under the keys in `recorded`), and the results."""
    text = sentences.chosen_first(notebook, names, fill, **values)
    return text, filed(tmp_path, notebook, recorded)


def _quartiles(median, low, high):
    return {"median_ms": median, "q1_ms": low, "q3_ms": high, "n": 9}


@pytest.mark.parametrize(
    "async_, sync, word",
    [
        ((27.24, 13.18, 32.04), (8.37, 5.81, 12.95), "lengthened"),  # async's half starts above sync's half ends
        ((63.45, 62.65, 68.7), (316.2, 216.2, 320.9), "shortened"),
        ((10.0, 8.0, 12.0), (11.0, 9.0, 13.0), "Overlap: no difference shown"),
        ((14.0, 6.0, 20.0), (8.0, 7.0, 9.0), "Overlap: no difference shown"),  # wide async spread
        # each median outside the other's half, yet the halves overlap (16.64-26.39): no difference shown
        ((29.8, 16.64, 37.77), (13.75, 11.28, 26.39), "Overlap: no difference shown"),
        ((10.0, 9.0, 11.5), (13.0, 11.5, 15.0), "Overlap: no difference shown"),  # halves touch at 11.5
        ((10.0, 9.0, 11.4), (13.0, 11.5, 15.0), "shortened"),  # just apart
    ],
)
def test_the_saving_comparison_names_its_direction_only_when_the_middle_halves_are_apart(tmp_path, async_, sync, word):
    a, s = _quartiles(*async_), _quartiles(*sync)
    spread = {"async": {"step_s": a}, "sync": {"step_s": s}}
    values = {"a": a["median_ms"], "a_lo": a["q1_ms"], "a_hi": a["q3_ms"]}
    values.update(s=s["median_ms"], s_lo=s["q1_ms"], s_hi=s["q3_ms"])
    names = ["async_shortens_<what>", "async_lengthens_<what>"]
    text, _ = _said(
        tmp_path,
        "stage5b_scaling",
        {"async_vs_sync": {"spread": spread}},
        names,
        {"what": "step", "label": "the step"},
        **values,
    )
    assert word in text, text
    # independently, the course's rule: a direction is named only when the two middle halves do not overlap
    apart = async_[1] > sync[2] or async_[2] < sync[1]
    assert apart == (word != "Overlap: no difference shown")
    if word == "lengthened":
        assert async_[1] > sync[2] and "shortened" not in text
    if word == "shortened":
        assert async_[2] < sync[1] and "lengthened" not in text


@pytest.mark.parametrize(
    "events, waits_most",
    [
        # (name, start ns, end ns) on one thread: a collective holding a long rendezvous wait
        ([("psum_invariant.7", 0, 1000), ("Rendezvous", 100, 900), ("Wait: pending_threads=2/4", 150, 850)], True),
        # a collective whose own run is most of its time, next to a fusion: waiting is the smaller part
        ([("psum_invariant.7", 0, 1000), ("Rendezvous", 100, 200), ("fusion.3", 1000, 1600)], False),
    ],
)
def test_the_busy_time_is_split_by_what_each_event_is(tmp_path, events, waits_most):
    by_kind = {"waiting": 0, "collective": 0, "program": 0}
    for row in profile.exclusive(events):
        by_kind[profile.kind(row["name"])] += row["own"] / 1e6
    split = {f"{k}_ms": v for k, v in by_kind.items()} | {"busy_ms": 1600e-6 if not waits_most else 1000e-6}
    sentences.arithmetic_share(split)
    filed(tmp_path, "stage4b_beyond", {"fused_trace": {"top_events": split}}, whole=True)
    # independently, by hand: the psum's own time is itself less its rendezvous; waits are their own time
    if waits_most:
        waiting, collective = (900 - 100 - 700) + 700, 1000 - 800
    else:
        waiting, collective = 200 - 100, 1000 - 100
    assert abs(by_kind["waiting"] - waiting / 1e6) < 1e-12 and abs(by_kind["collective"] - collective / 1e6) < 1e-12
    assert profile.kind("psum_invariant.7") == "collective" and profile.kind("dot_general.21") == "program"
    assert waits_most == (waiting > 0.5 * split["busy_ms"] * 1e6)  # the cases cover both sides of half the busy time


@pytest.mark.parametrize(
    "eager, four_devices, word",
    [
        ((1700.0, 1650.0), (0.68, 0.59, 0.85), "cost more than they save"),
        # values from one executed run: eager ~2,800x compiled, yet four devices against one inside the spread
        ((2932.0, 2883.0), (1.052, 0.76, 1.30), "that gap is clear beyond the spread. Four devices against one is not"),
        ((0.9, 0.2), (0.30, 0.2, 0.5), "not clear beyond the spread"),  # even eager overlaps the compiled halves
    ],
)
def test_the_timing_order_is_stated_only_beyond_the_middle_halves(tmp_path, eager, four_devices, word):
    one = (0.5353, 0.22, 2.70) if four_devices[0] > 1 else (0.23, 0.21, 0.29)
    timing = {"eager_4dev": {"median_ms": eager[0], "q1_ms": eager[1]}}
    timing["compiled_4dev"] = dict(zip(("median_ms", "q1_ms", "q3_ms"), four_devices))
    timing["compiled_1dev"] = dict(zip(("median_ms", "q1_ms", "q3_ms"), one))
    ratio, eager_ratio = four_devices[0] / one[0], eager[0] / four_devices[0]  # of the medians, by hand
    less_ratio = eager[0] * 0.3 / four_devices[0]  # as if compiling took 70% of the eager call's median
    timing["ratios"] = {"compiled_4dev_over_compiled_1dev": ratio, "eager_4dev_over_compiled_4dev": eager_ratio}
    timing["ratios"]["eager_4dev_less_compile_over_compiled_4dev"] = less_ratio
    values = {"e": eager[0], "e_lo": eager[1], "c4": four_devices[0], "c4_lo": four_devices[1]}
    values.update(c4_hi=four_devices[2], c1=one[0], c1_hi=one[2], r=ratio, re=eager_ratio, rc=less_ratio)
    names = ["timing_order", "timing_eager_clear"]
    text, _ = _said(tmp_path, "stage4a_profile", {"timing": timing}, names, **values)
    assert word in text, text
    # independently: each pair is clear only when one middle half ends before the other begins
    assert (four_devices[1] > one[2]) == (word == "cost more than they save")
    assert (eager[1] > max(four_devices[2], one[2])) == (word != "not clear beyond the spread")
    assert four_devices[0] > one[0]  # both medians in the same order: the old rule stated it either way
    # the ratio is stated with its reading, never before it: after the words that say whether the spread allows it
    at = text.index(f"4-device / 1-device = {ratio:.2f}x")
    assert ("within the spread" in text[at:]) == (word != "cost more than they save"), text
    assert ("order holds beyond the spread" in text[:at]) == (word == "cost more than they save"), text
    # where eager is clear of the compiled variants, the ratio without compiling is stated beside the one with it
    assert (f"{less_ratio:.0f}x by the median of each call less its own compile time" in text) == (
        word != "not clear beyond the spread"
    ), text
    assert sentences.timing_order(timing) == text
    sentences.record(str(tmp_path), "stage4a_profile", partial=True)


# the small capture's three calls of one compiled function: two executed runs (the first call 23x the last; the
# middle call 34x faster than the others), then calls within twice of each other, then a spread of exactly twice
EXAMPLE_CALLS = {
    "run": [4.271, 1.954, 0.184],
    "middle": [4.263, 0.124, 6.098],
    "even": [0.21, 0.19, 0.18],
    "twice": [0.2, 0.4, 0.3],
}


@pytest.mark.parametrize("case", sorted(EXAMPLE_CALLS))
def test_the_example_capture_says_more_than_twice_only_when_the_slowest_call_is(tmp_path, case):
    tiny_ms = EXAMPLE_CALLS[case]
    text = sentences.example_calls(tiny_ms)
    recorded = {"tiny_ms": tiny_ms, "fastest_ms": min(tiny_ms), "slowest_ms": max(tiny_ms)}  # as the closing cell
    found = filed(tmp_path, "stage4a_profile", {"trace_example": recorded})
    fastest, slowest = sorted(tiny_ms)[0], sorted(tiny_ms)[-1]  # by hand, over every call, not the first and last
    assert f"the calls took from {fastest:.3f} to {slowest:.3f} ms" in text, text
    wide = slowest > 2 * fastest
    assert wide == (case in ("run", "middle"))
    assert ("the slowest more than twice" in text) == wide, text
    assert found["claims"]["example_calls"]["holds"] == wide


def test_a_phase_ratio_is_computed_from_unrounded_medians_and_rounded_once(tmp_path):
    # 2.9444 / 2.4440 = 1.2047: a ratio of medians first rounded to 1.205 would be shown as 1.21
    slow = {"process": 0, "q1_ms": 2.5, "median_ms": 2.9444, "q3_ms": 3.1}
    fast = {"process": 1, "q1_ms": 2.2, "median_ms": 2.4440, "q3_ms": 2.7}
    ratio = 2.9444 / 2.4440
    recorded = {
        "compute_spread": {"slow": 0, "fast": 1, "ratio": ratio, "slow_q1_ms": 2.5, "fast_q3_ms": 2.7},
        "agreement_spread": {"waits": 0, "late": 1, "ratio": ratio, "waits_q1_ms": 2.5, "late_q3_ms": 2.7},
        "compiles": {"min_compile_ms": 90.0, "max_other_ms": 9.0, "max_other_other": 5, "max_other_process": "0"},
    }
    recorded["compiles"].update(max_other_phase="agreement", max_other_phase_ms=7.0)
    recorded["compiles"].update(max_other_second="data", max_other_second_ms=1.5)
    said = sentences.step_phases(recorded["compiles"], "1, 4", slow, fast, slow, fast)
    filed(tmp_path, "stage5b_scaling", {"step_times": recorded}, whole=True)
    assert f"{round(ratio, 2):.2f}×" == "1.20×" and "median is 1.20×" in said[1] and "median is 1.20×" in said[2], said
    # 2.5 < 2.7, by hand: the halves overlap, and the quartiles themselves are left to the table beside it
    assert "the middle halves overlap" in said[1] and "2.5" not in said[1] and "2.7" not in said[1], said
    # 90 > 9 ms: compilation is the tall bars, and the tallest other one is named, not explained
    # 7 of 9 ms is more than two thirds: "mostly", with its ms
    assert "step 5 of process 0 (mostly agreement: 7.0 of its 9.0 ms)" in said[0], said
    assert "do not name its cause" in said[0], said


def _step_phases_said(tmp_path, step_ms: float, tallest: tuple, second: tuple) -> str:
    """Stage 5b's step-phases sentence for a tallest step outside compilation of `step_ms` (its two longest phases
    (name, ms)), after every claim it records is checked against the recorded values."""
    spread = {"process": 0, "q1_ms": 2.5, "median_ms": 2.9, "q3_ms": 3.1}
    compiles = {"min_compile_ms": 90.0, "max_other_ms": step_ms, "max_other_other": 5, "max_other_process": "1"}
    compiles.update(max_other_phase=tallest[0], max_other_phase_ms=tallest[1])
    compiles.update(max_other_second=second[0], max_other_second_ms=second[1])
    recorded = {
        "compute_spread": {"slow": 0, "fast": 0, "ratio": 1.0, "slow_q1_ms": 2.5, "fast_q3_ms": 3.1},
        "agreement_spread": {"waits": 0, "late": 0, "ratio": 1.0, "waits_q1_ms": 2.5, "late_q3_ms": 3.1},
        "compiles": compiles,
    }
    said = sentences.step_phases(compiles, "1, 4", spread, spread, spread, spread)[0]
    filed(tmp_path, "stage5b_scaling", {"step_times": recorded})
    return said


@pytest.mark.parametrize("other_ms, stands", [(9.0, False), (95.0, True)])
def test_the_tallest_step_outside_compilation_is_named_either_way(tmp_path, other_ms, stands):
    said = _step_phases_said(tmp_path, other_ms, ("data", 0.8 * other_ms), ("compute", 0.1 * other_ms))
    assert ("another step took as long" in said) == stands == (other_ms >= 90.0), said  # by hand: 90 ms compiles
    assert "step 5 of process 1" in said and f"mostly data: {0.8 * other_ms:.1f} of its {other_ms:.1f} ms" in said, said


@pytest.mark.parametrize("peer_ms, shared", [(62.1, True), (32.0, True), (31.9, False)])
def test_the_tallest_other_step_is_read_against_the_same_step_on_its_peer(tmp_path, peer_ms, shared):
    """By hand: the tallest other step took 64.0 ms; the peer's same step counts as slow too from half of it, 32."""
    spread = {"process": 0, "q1_ms": 2.5, "median_ms": 2.9, "q3_ms": 3.1}
    compiles = {"min_compile_ms": 995.0, "max_other_ms": 64.0, "max_other_other": 5, "max_other_process": "1"}
    compiles.update(max_other_phase="compute", max_other_phase_ms=55.2, max_other_second="data")
    compiles.update(max_other_second_ms=6.0, max_other_peer="0", max_other_peer_ms=peer_ms)
    said = sentences.step_phases(compiles, "1, 4", spread, spread, spread, spread)[0]
    recorded = {
        "compute_spread": {"slow": 0, "fast": 0, "ratio": 1.0, "slow_q1_ms": 2.5, "fast_q3_ms": 3.1},
        "agreement_spread": {"waits": 0, "late": 0, "ratio": 1.0, "waits_q1_ms": 2.5, "late_q3_ms": 3.1},
        "compiles": compiles,
    }
    found = filed(tmp_path, "stage5b_scaling", {"step_times": recorded})
    assert "tallest_other_on_peer" in found[claims.CLAIMS], sorted(found[claims.CLAIMS])
    stated = f"took {peer_ms:.1f} ms, at least half" if shared else f"took {peer_ms:.1f} ms on process 0"
    assert stated in said, said
    assert ("On process 0 the same step" in said) == shared and ("under half as long" in said) == (not shared), said


@pytest.mark.parametrize(
    "ms, words",
    [
        # by hand: 6.2 of 11.7 ms is 53%, not above two thirds: both longest phases are named
        ((11.7, 6.2, 4.6), "compute 6.2 ms and data 4.6 ms of its 11.7"),
        ((9.0, 6.1, 2.0), "mostly compute: 6.1 of its 9.0 ms"),  # 6.1 > 6.0, two thirds of 9
        ((9.0, 6.0, 2.0), "compute 6.0 ms and data 2.0 ms of its 9.0"),  # exactly two thirds is not "mostly"
    ],
)
def test_a_step_is_mostly_one_phase_only_above_two_thirds(tmp_path, ms, words):
    said = _step_phases_said(tmp_path, ms[0], ("compute", ms[1]), ("data", ms[2]))
    assert words in said and ("mostly" in said) == (3 * ms[1] > 2 * ms[0]), said


def _verdict_text(tmp_path, before, after, threshold, control_after=1.0):
    """(the outcome, the verdict sentence, the results) for the target's `before` and `after` samples (ms), the control
    at 1.0 ms before and `control_after` ms after, once the sentence is filed and its claims checked."""

    def rows(prepare, update):
        return [{f"{trace.PREPARE}_ms": p, f"{trace.UPDATE}_ms": update} for p in prepare]

    guess = {"annotation": trace.PREPARE, "control": trace.UPDATE, "threshold_ms": threshold, "baseline_ms": 1.584}
    outcome = hypothesis.judge(guess, rows(before, 1.0), rows(after, control_after))
    values = {"c": outcome["cut_ms"], "n": outcome["noise_ms"], "d": outcome["control_drift_ms"]}
    control = outcome["sides"]["control"]
    values.update(r=outcome["reach_ms"], t=outcome["threshold_ms"])
    values.update(u_lo=control["unchanged"]["q1_ms"], u_hi=control["unchanged"]["q3_ms"])
    values.update(g_lo=control["changed"]["q1_ms"], g_hi=control["changed"]["q3_ms"])
    values.update(m=values["c"] - values["t"], s=outcome["spread_ms"], b=outcome["baseline_first_ms"])
    text, found = _said(
        tmp_path, "stage4a_profile", {"change": outcome}, sentences.VERDICT, {"verdict_of": "V"}, **values
    )
    return outcome, text, found


def test_a_verdict_whose_control_drifted_beyond_the_threshold_is_inconclusive(tmp_path):
    # a 1.0 ms cut clears threshold + noise, but the untouched control moved 0.3 ms: more than the effect predicted
    outcome, text, found = _verdict_text(tmp_path, [2.0] * 8, [1.0] * 8, 0.1, control_after=0.7)
    assert outcome["cut_ms"] - outcome["noise_ms"] >= 0.1  # the old rule confirmed this
    assert outcome["verdict"] == "inconclusive" and text.startswith("V: inconclusive. The control"), text
    assert not found[claims.CLAIMS]["change_confirmed"]["holds"]


TARGET = [1.29, 1.30, 1.31, 1.32, 1.324, 1.40, 1.44, 1.45]


# the second: the threshold was set against a first trace's 1.584 ms, and this capture's target measures less
@pytest.mark.parametrize(("threshold", "beyond"), [(0.267, False), (1.40, True)])
def test_the_effect_reads_only_its_own_capture_its_target_s_median_bounding_the_threshold(tmp_path, threshold, beyond):
    def rows(prepare):
        return [{f"{trace.PREPARE}_ms": p, f"{trace.UPDATE}_ms": 1.0} for p in prepare]

    guess = {"annotation": trace.PREPARE, "control": trace.UPDATE, "threshold_ms": threshold, "baseline_ms": 1.584}
    outcome = hypothesis.judge(guess, rows(TARGET), rows([v - 0.45 for v in TARGET]))
    whole = statistics.median(TARGET)  # by hand: the most the change can remove, in this capture
    assert math.isclose(outcome["reach_ms"], whole) and (threshold > whole) == beyond
    table = hypothesis.verdict_rows(outcome)
    assert len(table) == 3 and not any("reach" in str(v) for row in table for v in row.values())
    assert table[2]["unchanged − changed"].startswith(f"threshold {threshold:.3f}, noise "), table[2]

    said = sentences.verdict(outcome, "V")
    filed(tmp_path, "stage4a_profile", {"change": outcome})
    assert (outcome["inconclusive_because"] == "threshold_beyond_reach") == beyond
    assert ("more than the whole of the target in this capture" in said) == beyond, said
    if beyond:
        assert said.startswith("V on the effect: inconclusive.") and f"{whole:.3f} ms by median" in said, said
        assert "1.584 ms" in said, said
    else:  # a 0.45 ms cut, no noise: confirmed
        assert said.startswith(f"V on the effect: confirmed. The cut passes the threshold by {0.45 - threshold:.3f} ms")


def test_a_refuted_verdict_says_only_what_its_numbers_show(tmp_path):
    # the course run's case: a third of the annotation cut, well beyond the noise, yet short of the prediction
    before = [1.757, 1.63, 1.786, 1.76, 1.70, 1.75, 1.77, 1.78]
    real = [1.170, 1.14, 1.238, 1.17, 1.16, 1.15, 1.20, 1.18]
    outcome, text, _ = _verdict_text(tmp_path / "real", before, real, 0.8)
    cut = np.median(before) - np.median(real)
    assert outcome["verdict"] == "refuted" and cut - outcome["noise_ms"] > 0  # a real, smaller cut
    assert "lives elsewhere" not in text and "did shorten" in text
    _, none, _ = _verdict_text(tmp_path / "none", before, [v - 0.01 for v in before], 0.8)
    assert "no measurable cut" in none and "did shorten" not in none


@pytest.mark.parametrize(
    "compute, agreement, separated, named",
    [
        # (process 0's, process 1's) q1, median, q3 of each phase in ms; `named`: the process the closing line names
        (((11.5, 14.0, 16.0), (9.0, 10.2, 15.3)), ((1.9, 2.2, 2.7), (2.9, 3.4, 3.8)), "agreement", 0),  # 1 waits
        (((6.0, 6.5, 7.0), (3.0, 3.5, 4.0)), ((1.0, 1.2, 1.4), (1.3, 1.5, 1.7)), "compute", 0),
        (((4.0, 4.6, 6.0), (2.7, 2.8, 5.3)), ((1.4, 2.0, 2.6), (1.6, 1.8, 2.2)), None, None),  # both overlap
        (((2.0, 2.5, 3.0), (6.0, 6.5, 7.0)), ((3.0, 3.5, 4.0), (1.0, 1.2, 1.4)), "both", 1),  # 1 slow, 0 waits for it
        (((6.0, 6.5, 7.0), (3.0, 3.5, 4.0)), ((3.0, 3.5, 4.0), (1.0, 1.2, 1.4)), "both", None),  # 0 slow and 0 waits
    ],
)
def test_a_straggler_is_read_from_both_phases_and_only_beyond_the_spread(
    tmp_path, compute, agreement, separated, named
):

    def longer_first(pair):  # (longer, shorter) by median, as (process, (q1, median, q3))
        return sorted(enumerate(pair), key=lambda p: -p[1][1])

    (slow, (s_lo, s_med, _)), (fast, (_, f_med, f_hi)) = longer_first(compute)
    (waits, (w_lo, w_med, _)), (late, (_, l_med, l_hi)) = longer_first(agreement)
    recorded = {
        "compute_spread": {"slow": slow, "fast": fast, "ratio": s_med / f_med, "slow_q1_ms": s_lo, "fast_q3_ms": f_hi},
        "agreement_spread": {"waits": waits, "late": late, "ratio": w_med / l_med, "waits_q1_ms": w_lo,
                             "late_q3_ms": l_hi},
    }  # fmt: skip
    nb = "stage5b_scaling"
    said = [
        sentences.chosen(nb, "compute_spread_reading", {"slow": slow, "fast": fast}, r=s_med / f_med, q1_slow=s_lo,
                         q3_fast=f_hi),
        sentences.chosen(nb, "agreement_spread_reading", {"waits": waits, "late": late}, r=w_med / l_med, q1_wait=w_lo,
                         q3_late=l_hi),
        sentences.chosen_first(nb, sentences.STRAGGLER_NAMES, {"slow": slow, "waits": waits, "late": late},
                               q1_slow=s_lo, q3_fast=f_hi, q1_wait=w_lo, q3_late=l_hi, ps=slow, pl=late),
    ]  # fmt: skip
    filed(tmp_path, nb, {"step_times": recorded}, whole=True)
    # independently: a phase separates when the longer one's middle half starts above the other's end
    by_compute = compute[slow][0] > compute[fast][2]
    by_agreement = agreement[waits][0] > agreement[late][2]
    assert ("do not overlap" in said[0]) == by_compute == (separated in ("compute", "both"))
    assert ("do not overlap" in said[1]) == by_agreement == (separated in ("agreement", "both"))
    assert said[2].startswith("So these few steps single out no straggler") == (separated is None)
    # the closing line names the one process both phases point at, and the phase that shows it
    if named is not None:
        assert f"process {named}" in said[2] and f"process {1 - named}" not in said[2].split(":")[0], said[2]
    if separated == "compute":
        assert "compute phase" in said[2] and f"straggler is process {slow}" in said[2]
    if separated == "agreement":
        assert "agreement phase" in said[2] and f"late peer is process {late}" in said[2]
    if separated == "both":
        one = slow == late
        assert ("both phases point at" in said[2]) == one and ("name no single straggler" in said[2]) == (not one)


def _efficiency(one_ms, many_ms, w=4, rows=100):
    """A `scaling.weak`-like table: W = 1 and W = w, each with its samples (ms) and rows per second."""
    table = []
    for devices, samples in ((1, one_ms), (w, many_ms)):
        n = rows * devices
        q1, median, q3 = np.percentile(samples, [25, 50, 75])
        table.append(
            {
                "devices": devices,
                "rows": n,
                "samples_ms": list(samples),
                "median_ms": float(median),
                "rows_per_s": n / median * 1e3,
                "rows_per_s_middle_half": [n / q3 * 1e3, n / q1 * 1e3],
            }
        )
    lo_1, hi_1 = table[0]["rows_per_s_middle_half"]
    for row in table:
        row["efficiency"] = row["rows_per_s"] / (row["devices"] * table[0]["rows_per_s"])
        lo, hi = row["rows_per_s_middle_half"]
        row["efficiency_range"] = [lo / (row["devices"] * hi_1), hi / (row["devices"] * lo_1)]
    return {"table": table, "usable_cores": 2}


@pytest.mark.parametrize(
    "many_ms, word",
    [
        ((5.0, 5.2, 5.4, 5.6, 5.8), "fell"),  # 4 devices, 4x the rows, more than 4x the time: fewer rows per second
        ((2.0, 2.1, 2.2, 2.3, 2.4), "rose"),
        ((3.9, 4.0, 4.1, 4.2, 4.3), "did not change"),
    ],
)
def test_the_throughput_sentence_says_whether_more_devices_gave_more_rows(tmp_path, many_ms, word):
    one_ms = (0.95, 1.0, 1.02, 1.05, 1.1)
    efficiency = _efficiency(one_ms, many_ms)
    moved, bound = sentences.throughput(efficiency, 2)
    filed(tmp_path, "stage5b_scaling", {"efficiency": efficiency}, whole=True)
    assert f"Throughput {word}" in moved, moved
    # independently: rows per second from the medians, and whether the middle halves of the times overlap
    one_rate, many_rate = 100 / np.median(one_ms), 400 / np.median(many_ms)
    if word == "fell":
        assert many_rate < one_rate and min(many_ms) > 4 * max(one_ms) * 0.9
        assert "less than one device alone" in moved
    if word == "rose":
        assert many_rate > one_rate
    # the efficiency's range over the middle halves: the far ends of the time quartiles, by hand
    q1_1, q3_1 = np.percentile(one_ms, [25, 75])
    q1_w, q3_w = np.percentile(many_ms, [25, 75])
    lo, hi = (400 / q3_w) / (4 * 100 / q1_1), (400 / q1_w) / (4 * 100 / q3_1)
    assert [lo, hi] == pytest.approx(efficiency["table"][-1]["efficiency_range"])  # the range the table shows
    if word == "did not change":  # the range holds 1/4: no loss is read, and the rates' spreads are named
        assert lo <= 0.25 <= hi and "beyond the spread" in moved and "middle half" in moved, moved
    assert "bound" in bound


@pytest.mark.parametrize(
    "two_ms, cores, word",
    [
        ((1.9, 2.0, 2.05, 2.1, 2.2), 2, "did not rise"),  # two devices, twice the rows, twice the time
        ((1.0, 1.05, 1.1, 1.15, 1.2), 2, "rose beyond the spread"),  # twice the rows in about the same time
        ((1.0, 1.05, 1.1, 1.15, 1.2), 1, "With 1 usable core"),  # one core: nothing to gain, whatever the times
    ],
)
def test_the_second_device_is_read_against_the_cores_it_could_use(tmp_path, monkeypatch, two_ms, cores, word):
    import numpy as np

    from shardlab.course import results as record
    from shardlab.course import sentences

    monkeypatch.setattr(sentences, "_KEYS", {})  # only this test's sentences are filed
    one_ms, four_ms = (0.95, 1.0, 1.02, 1.05, 1.1), (3.9, 4.0, 4.1, 4.2, 4.3)
    efficiency = _efficiency(one_ms, four_ms)
    two = _efficiency(one_ms, two_ms, w=2)["table"][1]
    efficiency["table"].insert(1, two)
    efficiency["usable_cores"] = cores
    record.emit(str(tmp_path), "stage5b_scaling", "efficiency", efficiency, shown=False)
    said = sentences.throughput(efficiency, cores)
    sentences.record(str(tmp_path), "stage5b_scaling", partial=True)
    assert not check_claims(record.load(str(tmp_path), "stage5b_scaling"))
    assert len(said) == 4 and word in said[3], said
    q1_2, q3_2 = np.percentile(two_ms, [25, 75])  # by hand: W = 2's slowest quarter against one device's fastest
    rose = 200 / q3_2 > 100 / np.percentile(one_ms, 25)
    assert ("rose beyond the spread" in said[3]) == (rose and cores >= 2), said
    if "did not rise" in said[3]:
        assert f"{two['efficiency']:.3f} at W = 2" in said[3] and "not measured here" in said[3], said
        assert "ceiling" not in said[3], said  # no bound the efficiencies beside it could contradict


@pytest.mark.parametrize(
    "b, word",
    [
        ({"momentum": 0.5, "key": 0.3, "cursor": 0.1}, "in the same order"),
        ({"momentum": 0.5281, "key": 0.1372, "cursor": 0.1492}, "only the two smaller faults swap"),
        ({"momentum": 0.2, "key": 0.6, "cursor": 0.1}, "the costliest fault differs"),
        ({"momentum": 0.3, "key": 0.1, "cursor": 0.1}, "cost exactly the same"),  # a tie in the second fixture
    ],
)
def test_the_fault_ranking_sentence_names_only_the_order_both_fixtures_show(tmp_path, b, word):
    nb = "stage3a_checkpoint"
    errors = {"first": {"momentum": 0.215, "key": 0.1775, "cursor": 0.0785}, "second": b}
    text = sentences.fault_ranking(errors)
    found = filed(tmp_path, nb, {"fault_ranking": {"errors": errors}}, whole=True)
    assert word in text, text
    # independently: the orders largest first, and whether the second fixture has a tie
    order = {name: sorted(e, key=e.get, reverse=True) for name, e in errors.items()}
    tie = len(set(b.values())) < 3
    expected = (
        "cost exactly the same"
        if tie
        else "in the same order"
        if order["first"] == order["second"]
        else "only the two smaller faults swap"
        if order["first"][0] == order["second"][0]
        else "the costliest fault differs"
    )
    assert word == expected
    assert order["first"][0] in text  # each wording names the first fixture's costliest fault
    if word == "in the same order":
        assert " > ".join(order["first"]) in text
    found["fault_ranking"]["errors"]["second"]["momentum"] = 0.01  # the plant no longer says what was printed
    assert check_claims(found)


def test_the_fault_ranking_refuses_anything_but_two_fixtures_of_the_same_three_faults():
    one = {"momentum": 0.3, "key": 0.2, "cursor": 0.1}
    for bad in ({"a": one}, {"a": one, "b": {"momentum": 0.3, "key": 0.2}}, {"a": one, "b": one, "c": one}):
        with pytest.raises(UsageError, match="two fixtures"):
            sentences.fault_ranking(bad)


def _roofline_said(tmp_path, course_update: float) -> tuple[dict, list[str]]:
    """(the points, the roofline sentences) for the course update at `course_update` times its roofline beside the
    fused steps' 7.5 and 2.6, recorded and checked as a run checks them."""
    ratios = {"course_update": course_update, "fused_psum": 7.5, "fused_stats": 2.6}
    points = {name: {"measured_over_roofline": r} for name, r in ratios.items()}
    said = sentences.roofline(points, 4)
    recorded = {"points": points, "course_update_over_fused": roofline.gap(points), "devices": 4}
    recorded["over_shared_roof"] = {n: points[n]["measured_over_roofline"] / 4 for n in ("fused_psum", "fused_stats")}
    filed(tmp_path, "stage4b_beyond", {"roofline": recorded})
    return points, said


def shown_ratio(name: str, point: dict) -> str:
    """A step's measured/roofline ratio rounded as the sentences round it (roofline.DIGITS)."""
    return f"{point['measured_over_roofline']:.{roofline.DIGITS[name]}f}"


def test_the_roofline_sentence_states_the_ratio_and_rounds_as_the_table_does(tmp_path):
    points, said = _roofline_said(tmp_path, 7085.46)  # the course update alone ~945x the fused steps' ratio
    # independently: the ratio of the ratios (update against fused, like for like), to the nearest whole number
    by_hand = 7085.46 / max(7.5, 2.6)
    assert f"{by_hand:.0f} times the larger" in said[0] and "more than ten times" not in said[0], said[0]
    assert "7085x" in said[0] and shown_ratio("course_update", points["course_update"]) == "7085"
    # the old table rounded to one decimal first and then to four digits: 7086 beside a sentence's 7085
    assert show.number(round(7085.46, 1)) == "7086" and f"{7085.46:.0f}" == "7085"
    for name in points:  # every shown ratio appears in the sentences as the table shows it
        assert f"{shown_ratio(name, points[name])}x" in " ".join(said), (name, said)


@pytest.mark.parametrize("stopped_s, within", [(8.13, True), (10.5, False), (5.5, False)])
def test_the_skipped_batch_stop_is_read_against_the_bound_plus_the_pulse_check(tmp_path, stopped_s, within):
    found = {"detect_s": stopped_s, "timeout_s": 5.0, "pulse_window_s": 3.0}
    said = sentences.skip_stop(stopped_s, 5.0, 3.0)
    filed(tmp_path, "stage5a_protocol", {"skipped_batch": found})
    assert (abs(stopped_s - (5.0 + 3.0)) <= 2) == within  # by hand: the bound plus the pulse check, 2 s either way
    assert ("inside the 2 s allowed" in said) == within and ("slow to react" in said) == (not within), said
    assert f"{abs(stopped_s - 8.0):.2f} s away from" in said, said  # by hand: the gap to 5 + 3 s, either way
    assert str(stopped_s) not in said, said  # the time itself is the line above it


@pytest.mark.parametrize(
    "saved, published, resumed, survivor, preempted",
    [
        ([6], [], 3, -9, 8),  # one executed run: step 6 saved, the kill in step 9 came before its manifest
        ([6], [6], 6, -6, 9),  # the manifest written before the kill; JAX aborted process 1; a SIGTERM at a save
    ],
)
def test_drill_one_s_table_says_what_each_resume_found_from_its_steps(saved, published, resumed, survivor, preempted):
    kill = {"process": 0, "cause": "killed (SIGKILL)", "at_step": 8, "phase": "update", "exit_codes": {"0": -9}}
    kill |= {"saved": saved, "published": published, "resumed_from": resumed, "steps_lost": 8 - resumed}
    kill["exit_codes"]["1"] = survivor
    first = {"process": 1, "cause": "killed (SIGKILL)", "at_step": 6, "phase": "save-staged", "exit_codes": {}}
    first |= {"saved": [3, 6], "published": [3], "resumed_from": 3, "steps_lost": 3}
    term = {"process": None, "cause": f"preempted at step {preempted}", "at_step": preempted - 1, "phase": "update"}
    term |= {"saved": [6], "published": [6, preempted], "resumed_from": preempted, "steps_lost": 0, "exit_codes": {}}
    a, b, c = drill_records.interruptions(first, kill, term, [3, 6, 9])
    # independently: a saved step missing from the published ones is the one the row names
    unpublished = [n for n in saved if n not in published]
    assert b["the resume found"] == f"newest manifest: step {resumed}" + (
        f"; a write of step {unpublished[0]} begun, never published" if unpublished else ""
    )
    assert a["the resume found"] == "newest manifest: step 3; a write of step 6 begun, never published"
    assert c["the resume found"] == f"newest manifest: step {preempted}"
    # the last column lists each attempt's manifests, so (b)'s lost step 6 and (c)'s published one sit side by side
    assert [r["the attempt published"] for r in (a, b, c)] == [
        "3",
        ", ".join(map(str, published)) or "no step",
        f"6, {preempted}",
    ]
    assert ("found `D` in every controller's flags" in b["why"]) == bool(unpublished), b  # killed in `update`
    # with no write begun since, the why names the resume point and the regular save the kill came before
    assert (f"step {resumed} was the newest save published" in b["why"]) == (not unpublished), b
    assert ("(step 9)" in b["why"]) == (not unpublished) and "coordinator" not in b["why"], b
    assert "published any save still pending (step 6 here)" in c["why"], c
    ender = {-9: "the supervisor's SIGKILL", -6: "JAX's abort (SIGABRT)"}[survivor]  # by the signal's number
    assert b["interruption"].endswith(f"process 1 ended by {ender}"), b
    assert b["steps recomputed"] == 8 - resumed  # the resume point itself is the newest manifest, checked above
    regular = preempted in (3, 6, 9)  # by hand: is the preempted step one of the regular saves?
    assert ("one of the regular saves" in c["why"]) == regular, c
    # by hand: step 6 was still pending at that agreement, so before it the newest manifest was the resume point, 3
    assert ("would go back to step 3, step 6 not yet published" in c["why"]) == (not regular), c


def test_a_preempted_attempt_that_published_nothing_earlier_would_go_back_to_where_it_resumed():
    first = {"process": 1, "cause": "killed (SIGKILL)", "at_step": 6, "phase": "save-staged", "exit_codes": {}}
    first |= {"saved": [3, 6], "published": [3], "resumed_from": 3, "steps_lost": 3}
    kill = {"process": 0, "cause": "killed (SIGKILL)", "at_step": 6, "phase": "publish", "exit_codes": {"0": -9}}
    kill |= {"saved": [6], "published": [], "resumed_from": 3, "steps_lost": 3}
    term = {"process": None, "cause": "preempted at step 5", "at_step": 4, "phase": "update", "exit_codes": {}}
    term |= {"saved": [], "published": [5], "resumed_from": 5, "steps_lost": 0}
    _, b, c = drill_records.interruptions(first, kill, term, [3, 6, 9])
    assert b["why"].startswith("the same rule: the kill came before step 6 was published"), b  # not in `update`
    assert "(none here)" in c["why"] and "go back to step 3" in c["why"], c  # by hand: the attempt resumed at 3


@pytest.mark.parametrize(
    "split, answer",
    [
        # values from one executed run: waiting plus the collectives' unnamed time, 1.60 of 2.58 ms, against 0.98
        ({"waiting_ms": 0.34, "collective_ms": 1.26, "program_ms": 0.98, "busy_ms": 2.58}, "together, not the program"),
        # values from one executed run: the program 0.33 ms, only 3 % below waiting: not called the smallest
        ({"waiting_ms": 0.34, "collective_ms": 0.46, "program_ms": 0.33, "busy_ms": 1.13}, "together, not the program"),
        ({"waiting_ms": 0.3, "collective_ms": 0.4, "program_ms": 0.2, "busy_ms": 0.9}, "each longer than the program"),
        (
            {"waiting_ms": 0.2, "collective_ms": 0.2, "program_ms": 0.7, "busy_ms": 1.1},
            "the program, not the collective",
        ),
        # values from one executed run: 1.00 ms of program against 0.42 + 0.45 ms of meeting, one capture: no order
        ({"waiting_ms": 0.42, "collective_ms": 0.45, "program_ms": 1.00, "busy_ms": 1.87}, "neither clearly"),
    ],
)
def test_the_answer_to_arithmetic_or_meeting_is_chosen_by_the_parts(tmp_path, split, answer):
    said = sentences.arithmetic_share(split)
    filed(tmp_path, "stage4b_beyond", {"fused_trace": {"top_events": split}})
    assert answer in said, said
    w, c, p = split["waiting_ms"], split["collective_ms"], split["program_ms"]
    smallest = 1.25 * p < min(w, c)  # by hand: smaller than both by more than a quarter, as one capture allows
    assert (answer == "each longer than the program") == smallest
    assert (answer == "together, not the program") == (not smallest and w + c > 1.25 * p)
    assert (answer == "the program, not the collective") == (not smallest and p > 1.25 * (w + c))
    assert "untraced" not in said  # the capture is answered for itself, not against a loop of another K
    if answer == "together, not the program":  # by hand: meeting's share against the program's, as the ratio given
        assert f"together took {(w + c) / p:.1f}x the program time" in said, said


@pytest.mark.parametrize(
    "psum, stats, phrase",
    [
        (4.786, 1.01, "a ratio near 1 does not show"),  # values from one executed run: no rest for fixed cost to fill
        (7.5, 6.6, "does not time that rest"),
        (7.5, 2.6, "cannot say whether every fused step"),
        # values from one executed run: a roof 4x lower takes 1.67 below 1
        (9.02, 1.67, "cannot say whether every fused step"),
        (0.5, 2.6, "One ran faster"),
    ],
)
def test_fixed_cost_is_named_only_where_the_roofline_leaves_room_for_it(tmp_path, psum, stats, phrase):
    points = {"course_update": {"measured_over_roofline": 7085.0}}
    points |= {"fused_psum": {"measured_over_roofline": psum}, "fused_stats": {"measured_over_roofline": stats}}
    said = sentences.roofline(points, 4)
    recorded = {"points": points, "course_update_over_fused": roofline.gap(points), "devices": 4}
    recorded["over_shared_roof"] = {n: points[n]["measured_over_roofline"] / 4 for n in ("fused_psum", "fused_stats")}
    filed(tmp_path, "stage4b_beyond", {"roofline": recorded})
    assert len(said) == 2 and phrase in said[1], said
    # by hand: fixed cost is named only when both ratios stay 1.5x or more against a roof 4 devices could make 4x lower
    assert ("fixed cost" in said[1] and "little room" not in said[1]) == (min(psum, stats) / 4 >= 1.5)
    if min(psum, stats) / 4 >= 1.5:  # both ratios against the 4x lower roof, stated as computed by hand
        assert f"still {psum / 4:.1f}x and {stats / 4:.1f}x against a roof 4x lower" in said[1], said
    # a ratio at least 1 is said against the one-device roof only, the 4x lower one beside it
    near = 1 <= min(psum, stats) < 1.5
    assert ("at least the roofline of one device alone" in said[1]) == near, said


def test_a_real_cut_short_of_an_unclear_threshold_is_called_real(tmp_path):
    # one executed run, in shape: a cut well beyond the noise, its margin over the threshold within it
    before = [1.17, 1.20, 1.42, 1.25, 1.30, 1.19, 1.40, 1.21]
    after = [0.80, 0.82, 0.93, 0.81, 0.85, 0.80, 0.90, 0.83]
    cut = float(np.median(before) - np.median(after))
    outcome, text, _ = _verdict_text(tmp_path / "real", before, after, cut + 0.05)
    assert outcome["verdict"] == "inconclusive" and outcome["inconclusive_because"] == "threshold_within_noise"
    assert cut > outcome["noise_ms"] and abs(cut - outcome["threshold_ms"]) <= outcome["noise_ms"]  # by hand
    assert "V: inconclusive. The change did cut its target" in text and f"= {-0.05:.3f} ms" in text, text
    # a cut inside the noise: neither the effect nor the threshold can be told
    _, none, _ = _verdict_text(tmp_path / "none", before, [v - 0.02 for v in before], 0.05)
    assert "neither the effect nor whether it reaches the threshold" in none, none


def test_the_course_update_is_called_near_the_fused_steps_when_its_ratio_is_not_ten_times_theirs(tmp_path):
    _, said = _roofline_said(tmp_path, 20.0)
    assert 20.0 / 7.5 < 10 and f"{20.0 / 7.5:.1f} times the larger" in said[0], said[0]  # by hand: 2.7
    assert "not more than ten times" in said[0] and "the likely excess" not in said[0], said[0]


SPREAD_OUT = (-0.2, -0.15, -0.1, 0.1, 0.15, 0.2)  # added to a part's median: six samples with a wide middle half
TIGHT = (-0.01, -0.005, 0.0, 0.0, 0.005, 0.01)


@pytest.mark.parametrize(
    ("dispatch", "jitter", "other", "threshold", "effect", "cause"),
    [
        # (unchanged, changed) median per part: the dispatches fell by the threshold, beyond the spread
        ((0.50, 0.20), TIGHT, (0.90, 0.85), 0.25, "confirmed", "supported"),
        # the course run's shape: the sum fell, mostly in `other`; the dispatches short by far more than the noise
        ((0.434, 0.375), TIGHT, (0.797, 0.509), 0.217, "confirmed", "not supported"),
        # the dispatches fell by more than the threshold by median, but the middle halves overlap
        ((0.23, 0.11), SPREAD_OUT, (1.23, 0.84), 0.079, "confirmed", "not shown"),
        # the dispatches rose while the sum fell short: refuted, and the reason not supported either
        ((0.40, 0.45), TIGHT, (0.90, 0.80), 0.20, "refuted", "not supported"),
        # both short of a threshold within the noise: neither told
        ((0.50, 0.30), SPREAD_OUT, (0.90, 0.90), 0.25, "inconclusive", "not shown"),
        # the predicted fall is more than the whole part in this capture: the part cannot miss it, nor reach it
        ((0.134, 0.058), TIGHT, (1.10, 0.70), 0.241, "confirmed", "not shown"),
    ],
)
def test_the_effect_and_the_mechanism_are_judged_apart(tmp_path, dispatch, jitter, other, threshold, effect, cause):
    def rows(d, o, spread):
        return [{"jitted_dispatch_ms": d + j, "other_ms": o, f"{trace.UPDATE}_ms": 1.0} for j in spread]

    guess = {"annotation": trace.PREPARE, "control": trace.UPDATE, "threshold_ms": threshold,
             "target_keys": ["jitted_dispatch_ms", "other_ms"]}  # fmt: skip
    unchanged, changed = rows(dispatch[0], other[0], TIGHT), rows(dispatch[1], other[1], jitter)
    outcome = hypothesis.judge(guess, unchanged, changed)
    said = sentences.verdict(outcome, "V")
    because, elsewhere = sentences.mechanism(outcome, "V")
    filed(tmp_path, "stage4a_profile", {"change": outcome})

    # by hand: quartiles by linear interpolation, as the course states them; the noise is the larger of the
    # control's drift (none here: the update is 1.0 ms throughout) and half the widest middle half of the four sides
    def quartiles(values):
        return statistics.quantiles(values, n=4, method="inclusive")

    def sums(rows_):
        return [r["jitted_dispatch_ms"] + r["other_ms"] for r in rows_]

    sides = [sums(unchanged), sums(changed), [1.0] * 6, [1.0] * 6]
    noise = max((quartiles(v)[2] - quartiles(v)[0]) / 2 for v in sides)
    cut = statistics.median(sums(unchanged)) - statistics.median(sums(changed))
    before = [r["jitted_dispatch_ms"] for r in unchanged]
    after = [r["jitted_dispatch_ms"] for r in changed]
    fall = statistics.median(before) - statistics.median(after)
    apart = quartiles(after)[2] < quartiles(before)[0]
    assert math.isclose(outcome["noise_ms"], noise) and math.isclose(outcome["mechanism_fall_ms"], fall)
    by_hand = "confirmed" if cut - noise >= threshold else "refuted" if cut + noise < threshold else "inconclusive"
    assert by_hand == effect == outcome["verdict"]
    reason = "supported" if fall >= threshold and apart else "not shown"
    beyond = threshold > statistics.median(before)  # no fall of the part could reach the threshold
    reason = "not supported" if fall + noise < threshold and not beyond else reason
    assert reason == cause == outcome["mechanism_verdict"]
    shown = {row["medians, ms (middle half)"].split(":")[0]: row for row in hypothesis.verdict_rows(outcome)}
    assert shown["mechanism"]["unchanged − changed"] == f"fall {fall:.3f}"  # the part the mechanism reads, in view
    rest = shown["rest"]  # the other part, whose fall the sentence on where the cut went names
    assert (rest["unchanged loop"], rest["changed loop"]) == (f"{other[0]:.3f}", f"{other[1]:.3f}")
    assert rest["unchanged − changed"] == f"fall {other[0] - other[1]:.3f}"
    assert shown["mechanism"]["unchanged loop"].startswith(
        f"{statistics.median(before):.3f} ({quartiles(before)[0]:.3f}"
    )
    # one line each, each naming its own outcome only
    assert said.startswith(f"V on the effect: {effect}."), said
    assert because.startswith(f"V on the mechanism: {cause}."), because
    assert "mechanism" not in said and "jitted_dispatch" not in said, said
    if cause == "not supported":  # the part's medians, and what this capture says of the reason: no more
        assert f"{statistics.median(before):.3f} → {statistics.median(after):.3f} ms by median" in because, because
        assert "this capture does not support the stated reason" in because, because
        assert "wrong" not in because, because
    elif beyond:  # the threshold against the whole part, and no word against the reason
        assert f"more than the whole of jitted_dispatch in this capture's unchanged loop ({0.134:.3f} ms" in because
        assert "does not support" not in because, because
    elif cause == "supported":  # the part's medians beside its fall, so its share of the part can be read
        medians = f"{statistics.median(before):.3f} → {statistics.median(after):.3f} ms by median"
        assert f"{medians}, a fall of {fall:.3f} ms" in because, because
    else:  # the part's fall, to the digits of the threshold and noise it is compared with
        assert f"fell by {fall:.3f} ms" in because, because
    rest = other[0] - other[1]
    assert ("Most of the cut went elsewhere" in elsewhere) == (rest > cut / 2 and rest > fall), elsewhere
    whole = {"annotation": trace.PREPARE, "control": trace.UPDATE, "threshold_ms": threshold}  # no parts: not judged
    unsplit = [{f"{trace.PREPARE}_ms": 1.0, f"{trace.UPDATE}_ms": 1.0}] * 6
    (line,) = sentences.mechanism(hypothesis.judge(whole, unsplit, unsplit), "V")
    assert line.startswith("V on the mechanism: not judged apart"), line


@pytest.mark.parametrize(("loss", "weight"), [(1.4e-06, 1.2e-07), (0.0, 0.0), (0.0, 3e-08)])
def test_the_fault_free_group_s_difference_from_the_control_is_explained_only_when_there_is_one(tmp_path, loss, weight):
    said = sentences.uninterrupted_match({"max_loss_diff": loss, "max_weight_diff": weight})
    filed(tmp_path, "stage5a_protocol", {"uninterrupted": {"max_loss_diff": loss, "max_weight_diff": weight}})
    bitwise = loss == 0 and weight == 0  # by hand
    assert ("bit for bit, losses and weights" in said) == bitwise, said
    assert ("in another order" in said) == (not bitwise) and (f"{weight:.1e} in a weight" in said) == (not bitwise)


@pytest.mark.parametrize("saves", [[0.040, 0.050, 0.046], [0.002, 0.003, 0.001]])
def test_stage_5a_s_saves_and_steps_are_summed_up_by_their_medians(saves):
    # two processes, three steps each: whole steps of 6, 9 and 150 ms (the first compiles); median 9 ms by hand
    phases = [(0.001, 0.002, 0.003), (0.002, 0.003, 0.004), (0.01, 0.04, 0.1)]
    records = [{"step": n + 1, "data_s": d, "agreement_s": a, "compute_s": c} for n, (d, a, c) in enumerate(phases)]
    base = {"step_times": {0: records, 1: records}, "save_seconds": {0: saves, 1: saves[::-1]}}
    found = drill_records.save_and_step(base)
    middle = 1e3 * sorted(saves)[1]  # each process's saves, the same three: the median is the middle one
    assert found["median_step_ms"] == pytest.approx(9.0) and found["median_save_ms"] == pytest.approx(middle)
    assert found["saves"] == 6  # every process's saves
    assert (found["min_save_ms"], found["max_save_ms"]) == pytest.approx((1e3 * min(saves), 1e3 * max(saves)))
    warm = drill_records.save_and_step(base, [3])  # step 3 left out as a compiling step: 6, 9, 6, 9 ms
    assert warm["median_step_ms"] == pytest.approx(7.5) and warm["steps_left_out"] == [3]


@pytest.mark.parametrize(("dispatches", "threshold"), [([0.16, 0.17, 0.15], 0.08), ([0.5] * 3, 0.25)])
def test_the_worked_example_predicts_half_the_dispatches(dispatches, threshold):
    calls = ["PjitFunction(_threefry_split)", "PjitFunction(_shuffle)", "PjitFunction(_shuffle)"]  # one repeated
    rows = [{"jitted_dispatch_ms": d, "dispatched": calls} for d in dispatches]
    example = hypothesis.worked_example(rows)
    assert example["change"] == "one_call_reshuffle"
    assert "over 3 jitted calls per transition" in example["because"]  # every call counted, a repeat too
    assert example["threshold_ms"] == pytest.approx(threshold)  # by hand: half of the median
    assert hypothesis.whose(None)[0] == hypothesis.WORKED and hypothesis.whose({})[1] == "Your verdict"


@pytest.mark.parametrize(
    ("speedups", "nearest"),
    [
        ((19.9, 40.3, 299.8), ("10x", "100x", "100x")),  # one executed run: 40.3x is nearer 100x by ratio
        ((13.7, 20.4, 157.4), ("10x", "10x", "100x")),  # another
        ((0.8, 4.4, 4.6), (None, "2x", "10x")),  # a slowdown, and both sides of the 2x-10x boundary
    ],
)
def test_the_speedup_prediction_is_closed_with_the_option_nearest_in_log_ratio(tmp_path, speedups, nearest):
    loops = dict(zip(("fused_psum", "fused_stats", "floor_1dev"), speedups))
    said = sentences.nearest_option(loops)
    filed(tmp_path, "stage4b_beyond", {"fused_timing": {"speedup_over_course": loops}})
    for (loop, s), option in zip(loops.items(), nearest):
        if s >= 1:  # by hand: the option whose log is closest to log s
            assert min((2, 10, 100), key=lambda o: abs(math.log(s) - math.log(o))) == int(option[:-1])
            assert f"{loop} {s:.1f}x is nearest {option}" in said, said
        else:
            assert f"{loop} was slower than the course loop" in said, said


def _weak_table(t1, t2, t4, range2, range4=(0.2, 0.3)):
    rows = [{"devices": w, "median_ms": t, "efficiency": t1 / t} for w, t in ((1, t1), (2, t2), (4, t4))]
    rows[1]["efficiency_range"], rows[2]["efficiency_range"] = list(range2), list(range4)
    return {"table": rows}


@pytest.mark.parametrize(
    ("range4", "option"),
    [
        ((0.158, 0.271), "not to be told apart"),  # one executed run: the range crosses 1/4
        ((0.1, 0.2), "below 1/4"),
        ((0.26, 0.34), "near 1/4"),
        ((0.36, 0.6), "near 0.5"),
        ((0.75, 1.1), "near 1"),
        ((0.3, 0.4), "not to be told apart"),  # crosses where 1/4 and 0.5 meet
    ],
)
def test_the_efficiency_prediction_is_closed_with_the_option_its_range_lies_in(tmp_path, range4, option):
    efficiency = {**_weak_table(1.0, 2.0, 4.0, (0.4, 0.6), range4), "usable_cores": 2}
    said = sentences.efficiency_option(efficiency)
    filed(tmp_path, "stage5b_scaling", {"efficiency": efficiency})
    assert said.startswith(f"So, to the prediction at W = 4: {option}"), said
    lines = (0.25, (0.25 * 0.5) ** 0.5, 0.5**0.5)  # by hand: 1/4, then the geometric means of neighbouring options
    crosses = any(range4[0] < line <= range4[1] for line in lines)
    assert (option == "not to be told apart") == crosses
    if crosses:  # the options the range reaches, each named, and no other
        names = ("below 1/4", "near 1/4", "near 0.5", "near 1")
        edges = (0.0, *lines, float("inf"))
        reached = [n for n, a, b in zip(names, edges, edges[1:]) if range4[0] < b and range4[1] >= a]
        assert said.endswith(f"spans {', '.join(reached[:-1])} and {reached[-1]}."), said


# four traced transitions each: one executed run (prepare longer in 3 of 4, the update's median lifted by two
# large values), then each annotation clearly longer, then durations with no value beyond twice its median
TRACED = {
    "run": ([1.282, 1.613, 6.629, 1.575], [6.094, 0.5815, 2.935, 0.5703]),
    "prepare": ([2.0, 2.2, 2.1, 2.4], [1.0, 1.1, 0.9, 1.2]),
    "update": ([0.5, 0.6, 0.55, 0.7], [1.5, 1.4, 1.6, 1.45]),
    "even": ([1.0, 1.1, 0.9, 1.2], [1.05, 0.95, 1.15, 1.0]),
}


@pytest.mark.parametrize("case", sorted(TRACED))
def test_the_longer_annotation_is_named_only_when_its_middle_half_lies_above_the_other(tmp_path, case):
    prepare, update = TRACED[case]
    rows_ = list(zip(prepare, update))
    rows = [{"transition": i + 1, f"{trace.PREPARE}_ms": p, f"{trace.UPDATE}_ms": u} for i, (p, u) in enumerate(rows_)]
    dominant = trace.dominant(rows)
    said = sentences.dominance(dominant, 2)
    why = sentences.example_target(dominant)
    filed(tmp_path, "stage4a_profile", {"trace": {"dominant": dominant}, "environment": {"cpu_count": 2}})

    # by hand: quartiles by linear interpolation; an annotation is longer only if its middle half starts above
    # the other's end
    def half(values):
        q = statistics.quantiles(values, n=4, method="inclusive")
        return q[0], q[2]

    (p_lo, p_hi), (u_lo, u_hi) = half(prepare), half(update)
    longer = "prepare" if p_lo > u_hi else "update" if u_lo > p_hi else None
    assert longer == {"run": None, "prepare": "prepare", "update": "update", "even": None}[case]
    first = said[0]
    assert ("prepare_and_place is longer beyond the spread" in first) == (longer == "prepare"), first
    assert ("compiled_update_and_wait is longer beyond the spread" in first) == (longer == "update"), first
    assert ("Neither annotation is longer beyond the spread" in first) == (longer is None), first
    assert f"{p_lo:.3f}–{p_hi:.3f} ms" in first and f"{u_lo:.3f}–{u_hi:.3f} ms" in first, first
    k = sum(p > u for p, u in rows_)
    assert f"{k} of 4 transitions" in first, first
    # every duration beyond twice its annotation's median is named, with its transition; none is named otherwise
    named = (("prepare_and_place", prepare), ("compiled_update_and_wait", update))
    beyond = [(i + 1, n, v) for n, values in named for i, v in enumerate(values) if v > 2 * statistics.median(values)]
    assert (said[1] == "No traced duration is more than twice its annotation's median.") == (not beyond), said[1]
    for transition, name, value in beyond:
        assert f"transition {transition}'s {name} {value:.3f} ms" in said[1].lower(), said[1]
    if case == "run":  # the executed run's two: transition 1's update and transition 3's preparation
        assert [b[:2] for b in beyond] == [(3, "prepare_and_place"), (1, "compiled_update_and_wait")]
    # the worked example's reason follows the same reading: it never calls the preparation longer when it is not
    assert ("was the longer annotation beyond the spread" in why) == (longer == "prepare"), why
    assert ("compiled_update_and_wait was the longer annotation" in why) == (longer == "update"), why
    assert ("neither annotation was longer beyond the spread" in why) == (longer is None), why


@pytest.mark.parametrize(
    ("first", "unchanged", "cut", "moved"),
    [
        (1.381, 1.055, 0.317, True),  # one executed run: the untouched target moved 0.326 ms, more than the cut
        (1.237, 0.945, 0.295, True),  # another: a move of 0.292 ms, as large as the 0.295 ms cut
        (1.10, 0.90, 0.317, True),  # 0.200 ms: under the cut, over half of it
        (1.10, 1.05, 0.317, False),
        (0.90, 1.25, 0.30, True),  # a rise counts as a move too
        (1.00, 1.05, -0.20, False),  # a change that lengthened its target: the move is read against the cut's size
    ],
)
def test_the_target_s_move_between_captures_is_set_beside_the_cut(tmp_path, first, unchanged, cut, moved):
    outcome = {"baseline_first_ms": first, "reach_ms": unchanged, "cut_ms": cut}
    said = sentences.capture_drift(outcome)
    filed(tmp_path, "stage4a_profile", {"change": outcome})
    assert (abs(first - unchanged) >= abs(cut) / 2) == moved  # by hand: half the cut's size
    assert said.startswith("With no code changed, the target moved between captures") == moved, said
    assert said.startswith("With no code changed, the target went from") == (not moved), said
    assert f"{first:.3f} ms" in said and f"{unchanged:.3f} ms" in said and f"{cut:.3f} ms cut" in said, said
    assert "only this capture's two loops" in said, said


def _chosen_and_filed(tmp_path, notebook: str, recorded: dict, name: str, keys: dict, **values) -> tuple[str, dict]:
    """A stage 1-3 sentence chosen for `values` as its lesson cell chooses it, filed as its closing cell files it."""
    text = sentences.chosen(notebook, name, **values)
    return text, filed(tmp_path, notebook, recorded, keys={name: keys})


@pytest.mark.parametrize(
    "events, both",
    [
        (
            [
                ("os.mkdir", ["b.tmp"]),
                ("open", ["b.tmp/x"]),
                ("open", ["b.tmp/commit_success.txt"]),
                ("os.rename", ["b.tmp", "b"]),
            ],
            True,
        ),  # the two marks: the commit file last, then the rename
        ([("os.mkdir", ["b"]), ("open", ["b/x"]), ("open", ["b/commit_success.txt"])], False),  # commit file only
        (
            [
                ("os.mkdir", ["b.tmp"]),
                ("open", ["b.tmp/commit_success.txt"]),
                ("open", ["b.tmp/x"]),
                ("os.rename", ["b.tmp", "b"]),
            ],
            False,
        ),  # renamed, but the commit file is not the last write
        (
            [
                ("os.mkdir", ["b"]),
                ("os.mkdir", ["b.tmp"]),
                ("open", ["b.tmp/commit_success.txt"]),
                ("os.rename", ["b.tmp", "b"]),
            ],
            False,
        ),  # the final name used before the rename
    ],
)
def test_the_publish_sentence_says_both_marks_only_when_the_trace_shows_both(tmp_path, events, both):
    order = orbax_lesson.publish_order(events, "b")
    publish = {
        "renamed_to_final": order["renamed"],
        "marker_written_last": order["marker_last"],
        "final_name_used_early": order["early"],
    }
    keys = {
        "renamed": "orbax_publish.renamed_to_final",
        "marker_last": "orbax_publish.marker_written_last",
        "early": "orbax_publish.final_name_used_early",
    }
    text, _ = _chosen_and_filed(
        tmp_path, "stage3c_orbax_lesson", {"orbax_publish": publish}, "publish_uses_both_marks", keys, **order
    )
    # independently of publish_order: the last event is a rename to the final name, the last write before it is the
    # commit file inside the temporary folder, and nothing before it names the final folder
    last_write = [paths[0] for event, paths in events if event == "open"][-1]
    by_hand = (
        events[-1] == ("os.rename", ["b.tmp", "b"])
        and last_write == "b.tmp/commit_success.txt"
        and not any(p.split("/")[0] == "b" for _, paths in events[:-1] for p in paths)
    )
    assert by_hand == both
    assert text.startswith("Both, in this version") == both, text
    assert (f"by a rename: {order['renamed']} (1 = yes)" in text) == (not both), text


@pytest.mark.parametrize(
    "changes, epochs, word",
    [
        ([5], 2, "nowhere but where a new epoch began"),  # lazy: the 5th call finds 23 rows in batches of 7 used up
        ([4], 2, "eagerly"),  # eager: the 4th call, which takes the last ids, draws
        ([5, 9], 3, "nowhere but where a new epoch began"),
        ([4, 8], 3, "eagerly"),
    ],
)
def test_the_walk_sentence_says_where_the_key_changed_for_either_sampler(tmp_path, changes, epochs, word):
    per_epoch = 4  # 23 rows in batches of 7: 7, 7, 7, 2
    starts = [1 + e * per_epoch for e in range(1, epochs)]
    walk_keys = {"changes": changes, "count": len(changes), "epoch_starts": starts}
    keys = {"count": "walk_keys.count", "epochs": "coverage.epochs", "first": "walk_keys.changes.0"}
    keys["start"] = "walk_keys.epoch_starts.0"
    recorded = {"walk_keys": walk_keys, "coverage": {"epochs": epochs}}
    text, found = _chosen_and_filed(
        tmp_path, "stage1_batches", recorded, "key_changes_at_epoch_start", keys,
        count=len(changes), epochs=epochs, first=changes[0], start=starts[0],
    )  # fmt: skip
    assert word in text, text
    assert (word == "eagerly") == (changes != starts)  # independently: lazy iff every change opens an epoch
    assert f"batch {changes[0]}" in text
    found["walk_keys"]["changes"][0] += 1  # the plant: the recorded walk no longer says what was printed
    assert check_claims(found)


@pytest.mark.parametrize("empty", [False, True])
def test_the_sum_of_local_means_sentence_reports_the_norms_it_was_given_on_each_outcome(tmp_path, empty):
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(8, 4)), rng.normal(size=8)
    m = np.array([1.0] * 7 + [0.0])
    if empty:  # one row: 1, 2 and 4 blocks all hold it once, so the sum of local means never grows
        m = np.array([1.0] + [0.0] * 7)
    w = np.linspace(-1.0, 1.0, 4)
    r = np.where(m > 0, x @ w - y, 0.0)
    norms = []
    for k in (1, 2, 4):  # each block's own mean gradient, added: NumPy by hand, empty blocks left out
        total = np.zeros(4)
        for xs, rs, ms in zip(np.split(x, k), np.split(r, k), np.split(m, k)):
            if ms.sum() > 0:
                total += 2.0 * (rs * ms) @ xs / ms.sum()
        norms.append(float(np.linalg.norm(total)))
    g = float(np.linalg.norm(2.0 * (r * m) @ x / m.sum()))
    recorded = {"local_means": {"sum_norms": norms, "global_norm": g}}
    keys = {"n1": "local_means.sum_norms.0", "n2": "local_means.sum_norms.1", "n4": "local_means.sum_norms.2"}
    keys["g"] = "local_means.global_norm"
    text, found = _chosen_and_filed(
        tmp_path, "stage2_update", recorded, "sum_of_local_means_grows", keys,
        n1=norms[0], n2=norms[1], n4=norms[2], g=g,
    )  # fmt: skip
    grows = norms[0] < norms[1] < norms[2]
    assert grows != empty  # seven rows grow here; one row gives the same sum on every split
    assert ("grows with the number of blocks" in text) == grows and ("does not grow" in text) == (not grows), text
    assert "device" not in text and text.startswith("NumPy, the same slots cut into 1, 2 and 4 blocks"), text
    assert f"{norms[2]:.3g} for 4" in text and math.isclose(norms[0], g)  # one block is the global mean
    found["local_means"]["sum_norms"][2] = norms[0] if grows else 10 * norms[1]  # the plant: not the norm printed
    assert check_claims(found)


ORIGINAL = {
    "seventeen": {"momentum": 0.34, "cursor": 0.04, "key": 0.0617},
    "twentynine": {"momentum": 0.128, "cursor": 0.0938, "key": 0.173},
}


@pytest.mark.parametrize(
    "second, holds",
    [
        ({"momentum": 0.5281, "cursor": 0.1492, "key": 0.1372}, False),  # momentum first: not key > momentum > cursor
        ({"momentum": 0.15, "cursor": 0.1, "key": 0.2}, True),
        ({"momentum": 0.15, "cursor": 0.15, "key": 0.2}, False),  # a tie is no strict order
    ],
)
def test_each_setting_is_set_beside_the_original_course_order(tmp_path, second, holds):
    nb = "stage3a_checkpoint"
    errors = {"seventeen": {"momentum": 0.215, "key": 0.1775, "cursor": 0.0785}, "twentynine": second}
    lines = sentences.fault_ranking(errors, ORIGINAL).splitlines()
    found = filed(tmp_path, nb, {"fault_ranking": {"errors": errors}}, whole=True)
    assert len(lines) == 3 and "one run each" not in " ".join(lines)
    for name, line in zip(errors, lines[1:]):
        # independently: this run's values taken in the original's order, largest first, strictly falling
        theirs = sorted(ORIGINAL[name], key=ORIGINAL[name].get, reverse=True)
        same = all(errors[name][a] > errors[name][b] for a, b in zip(theirs, theirs[1:]))
        assert line.startswith(f"{name}: the original course's order, {' > '.join(theirs)},"), line
        assert ("holds here too" in line) == same and ("does not hold" in line) == (not same), line
        assert same == (holds if name == "twentynine" else True)
    found["fault_ranking"]["errors"]["twentynine"]["key"] = 0.0 if holds else 1.0  # the plant: not the error printed
    assert check_claims(found)
    with pytest.raises(UsageError, match="original"):
        sentences.fault_ranking(errors, {"seventeen": ORIGINAL["seventeen"]})


def test_the_text_after_the_fault_table_names_the_original_course_costliest_fault_per_setting():
    from shardlab.verify import faults

    text = (REPO / "notebooks" / "stage3a_checkpoint.md").read_text()
    said = re.search(r"the original course, on its own fixture, put (\w+) first for seed 17 and the (\w+) first", text)
    assert said, "the sentence on the original course's order is gone"
    # independently: the largest of the original course's three fault errors in each setting
    costliest = [max((e for e in faults.COURSE[s].items() if e[0] != "none"), key=lambda e: e[1])[0]
                 for s in ("seed17_batch7", "seed29_batch10")]  # fmt: skip
    assert list(said.groups()) == costliest, (said.groups(), costliest)


@pytest.mark.parametrize("weight, exact", [(0.0, True), (1.2e-07, False)])
def test_a_world_change_says_how_far_its_weights_are_from_the_control(tmp_path, monkeypatch, weight, exact):
    monkeypatch.setattr(sentences, "_KEYS", {})  # only this test's sentence is filed

    said = sentences.world_match("1x4", weight)
    filed(tmp_path, "stage5a_protocol", {"world_change": {"runs": {"1x4": {"max_weight_diff": weight}}}})
    assert (said == "bit for bit") == exact, said
    assert (f"weights up to {weight:.1e} apart" in said) == (not exact), said  # the difference itself, shown


@pytest.mark.parametrize(
    ("sync", "async_"),
    [
        ((5.9, 89.6, 6.2), (13.1, 48.9, 7.1)),  # one executed run: the longer async step still held the loop less
        ((5.0, 20.0, 5.0), (30.0, 22.0, 6.0)),  # an async step so much longer that it held the loop more in all
    ],
)
def test_the_loop_held_per_step_adds_the_step_the_blocking_save_and_the_publish(tmp_path, monkeypatch, sync, async_):
    monkeypatch.setattr(sentences, "_KEYS", {})  # only this test's sentence is filed
    spread = {
        m: {"step_s": _quartiles(t, t - 1, t + 1), "save_block_s": _quartiles(b, b - 1, b + 1)}
        | {"publish_s": _quartiles(p, p - 1, p + 1)}
        for m, (t, b, p) in (("sync", sync), ("async", async_))
    }
    said = sentences.save_and_publish(spread)
    filed(tmp_path, "stage5b_scaling", {"async_vs_sync": {"spread": spread}})
    shorter = sum(async_) < sum(sync)  # by hand: the three medians added
    assert ("less in all with asynchronous saving" in said) == shorter, said
    assert ("no less in all" in said) == (not shorter), said
    for parts in (sync, async_):  # each term and its sum, by hand
        assert " + ".join(f"{v:.1f}" for v in parts) + f" = {sum(parts):.1f} ms" in said, said


@pytest.mark.parametrize(
    ("stats", "psum", "word"),
    [
        ((0.085, 0.2465, 0.313), (0.122, 0.2002, 0.228), "neither faster nor slower"),  # one executed run's halves
        ((0.05, 0.06, 0.07), (0.12, 0.2, 0.23), "was faster per step"),
        ((0.30, 0.35, 0.40), (0.12, 0.2, 0.23), "was slower per step"),
    ],
)
def test_one_collective_per_dispatch_is_called_faster_only_beyond_both_middle_halves(
    tmp_path, monkeypatch, stats, psum, word
):
    monkeypatch.setattr(sentences, "_KEYS", {})  # only this test's sentences are filed
    per_step = {"fused_stats": stats[1], "fused_psum": psum[1]}
    half = {"fused_stats": [stats[0], stats[2]], "fused_psum": [psum[0], psum[2]]}
    said = sentences.stats_beside_psum(per_step, half)
    filed(
        tmp_path, "stage4b_beyond", {"fused_timing": {"median_per_step_ms": per_step, "middle_half_per_step_ms": half}}
    )
    faster, slower = stats[2] < psum[0], stats[0] > psum[2]  # by hand: one middle half wholly below the other
    assert word in said, said
    assert ("was faster per step" in said) == faster and ("was slower per step" in said) == slower, said
    assert ("d × d matrix A" in said) == (not faster), said  # the larger collective named where it did not pay
    assert f"{stats[1]:.3g} ms (middle half {stats[0]:.3g}–{stats[2]:.3g})" in said, said


@pytest.mark.parametrize(
    ("two_ms", "word"),
    [
        ((3.9, 4.0, 4.1, 4.2, 4.3), "rose beyond the spread"),  # W = 2 as slow as W = 4 with half the rows
        ((1.0, 1.05, 1.1, 1.15, 1.2), "fell again beyond the spread"),
        ((1.95, 2.0, 2.05, 2.1, 2.15), "moved within the spread"),  # half W = 4's rows in about half its time
    ],
)
def test_the_last_step_of_devices_is_read_on_its_own(tmp_path, monkeypatch, two_ms, word):
    monkeypatch.setattr(sentences, "_KEYS", {})
    one_ms, four_ms = (0.95, 1.0, 1.02, 1.05, 1.1), (3.9, 4.0, 4.1, 4.2, 4.3)
    efficiency = _efficiency(one_ms, four_ms)
    efficiency["table"].insert(1, _efficiency(one_ms, two_ms, w=2)["table"][1])
    said = sentences.throughput(efficiency, 2)
    filed(tmp_path, "stage5b_scaling", {"efficiency": efficiency})
    assert word in said[1] and said[1].startswith("From W = 2 to W = 4"), said
    # by hand: rows per second from the time quartiles, 200 rows at W = 2, 400 at W = 4
    two_lo, two_hi = 200 / np.percentile(two_ms, 75), 200 / np.percentile(two_ms, 25)
    four_lo, four_hi = 400 / np.percentile(four_ms, 75), 400 / np.percentile(four_ms, 25)
    assert ("rose beyond" in said[1]) == (four_lo > two_hi) and ("fell again" in said[1]) == (four_hi < two_lo)
    assert "min(C, W)/W = 2/4" in said[2], said


@pytest.mark.parametrize(("weight", "loss"), [(1.2e-07, 9.5e-07), (0.0, 0.0)])
def test_the_supervised_path_states_its_largest_gaps_from_the_control(tmp_path, monkeypatch, weight, loss):
    monkeypatch.setattr(sentences, "_KEYS", {})
    path = {"max_weight_diff": weight, "max_loss_diff": loss}
    said = sentences.supervised_match(path)
    filed(tmp_path, "stage5a_protocol", {"several_failures": path})
    bitwise = weight == 0 and loss == 0  # by hand
    assert ("bit for bit" in said) and ("not bit for bit" in said) == (not bitwise), said
    assert (f"losses up to {loss:.1e}" in said and f"weights up to {weight:.1e}" in said) == (not bitwise), said


@pytest.mark.parametrize(
    ("course", "loop", "crosses"),
    [
        ((1.2, 2.9), (0.0389, 0.0721), "10x and 100x"),  # one executed run: 30.7x at the medians, 16.6x-74.6x
        ((1.5, 1.7), (0.14, 0.16), None),  # a narrow spread: 9.4x-12.1x stays near 10x
        ((0.8, 1.2), (0.2, 0.25), "2x and 10x"),  # 3.2x-6x crosses 4.5x
    ],
)
def test_a_speedup_whose_spread_crosses_an_options_meeting_point_is_not_given_an_option(
    tmp_path, course, loop, crosses
):
    half = {"course_loop": list(course), "fused_psum": list(loop), "fused_stats": list(loop)}
    half["floor_1dev"] = [course[0] / 400, course[1] / 300]
    speedups = {name: statistics.mean(course) / statistics.mean(v) for name, v in half.items() if name != "course_loop"}
    said = sentences.nearest_option(speedups, half)
    filed(
        tmp_path, "stage4b_beyond", {"fused_timing": {"speedup_over_course": speedups, "middle_half_per_step_ms": half}}
    )
    lo, hi = course[0] / loop[1], course[1] / loop[0]  # by hand: the slowest course step over the fastest loop step
    lines = {"2x and 10x": math.sqrt(20), "10x and 100x": math.sqrt(1000)}
    assert (crosses is not None) == any(lo < line < hi for line in lines.values())
    part = said.split("; ")[1]  # fused_stats
    if crosses:
        assert f"{lo:.3g}x–{hi:.3g}x" in part and f"where {crosses} meet" in part and "nearest" not in part, part
    else:
        assert "is nearest 10x" in part and "does not tell" not in part, part


def test_the_roofline_sentence_says_what_each_row_times_and_that_the_gap_is_at_most_its_value(tmp_path):
    _, said = _roofline_said(tmp_path, 1116.0)
    assert "one call of its compiled update" in said[0] and "one dispatch of K steps divided by K" in said[0]
    assert f"at most {1116.0 / 7.5:.0f} times the larger" in said[0] and "dataset copy" in said[0], said[0]
