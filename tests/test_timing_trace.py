"""Stage 4 harnesses: the timing loop (checked before timed, counts, order) and the trace reader.

Nothing here asserts on how long anything took: the timing loop runs with a fake clock, and the
trace reader is compared with a plain reading of the Perfetto JSON and with deliberately damaged files.
"""

import gzip
import json
import shutil

import jax
import numpy as np
import pytest

import shardlab as sl
from shardlab.errors import TraceError, VariantMismatchError
from shardlab.evidence import timing, trace

pytestmark = pytest.mark.stage4

NAMES = ["eager_4dev", "compiled_4dev", "compiled_1dev"]


# --- timing ---------------------------------------------------------------------------------


def test_rotations_let_every_variant_lead_in_turn():
    rounds = timing.rotations(NAMES, 11)
    assert len(rounds) == 11
    assert all(sorted(r) == sorted(NAMES) for r in rounds)
    assert [r[0] for r in rounds] == [NAMES[i % 3] for i in range(11)]
    for r in rounds:  # a rotation keeps the cyclic order
        start = NAMES.index(r[0])
        assert r == [NAMES[(start + k) % 3] for k in range(3)]


class FakeClock:
    """Returns 0, 1, 2, ... seconds and logs each reading in a shared event list."""

    def __init__(self, events):
        self.events, self.now = events, -1

    def __call__(self):
        self.now += 1
        self.events.append(("clock", self.now))
        return float(self.now)


def test_measure_warms_alternates_and_blocks_on_every_output():
    events = []

    def variant(name):
        def fn(x):
            events.append(("call", name))
            return {"out": (name, x)}

        return timing.Variant(fn, (name.upper(),), None, None)

    def block(tree):
        events.append(("block", tree))
        return tree

    variants = {name: variant(name) for name in NAMES}
    measured = timing.measure(variants, samples=11, warmup=2, clock=FakeClock(events), block=block)

    warm, timed = events[: 2 * 3 * 2], events[2 * 3 * 2 :]
    assert [e for e in warm if e[0] == "call"] == [("call", n) for r in timing.rotations(NAMES, 2) for n in r]
    assert not [e for e in warm if e[0] == "clock"], "warm-up calls are not timed"
    assert len(timed) == 11 * 3 * 4
    calls = []
    for i in range(0, len(timed), 4):
        clock_start, call, blocked, clock_stop = timed[i : i + 4]
        assert clock_start[0] == "clock" and clock_stop[0] == "clock"
        assert call[0] == "call"
        assert blocked == ("block", {"out": (call[1], call[1].upper())}), "the whole output tree is blocked on"
        calls.append(call[1])
    assert calls == [n for r in timing.rotations(NAMES, 11) for n in r]
    assert measured["order"] == timing.rotations(NAMES, 11)
    assert measured["warm_compilations"] == {n: {"count": 0, "total_ms": 0.0} for n in NAMES}
    assert {n: len(s) for n, s in measured["samples_ms"].items()} == {n: 11 for n in NAMES}
    assert all(s == 1000.0 for n in NAMES for s in measured["samples_ms"][n])  # one fake second per sample


def test_measure_counts_the_compiling_inside_each_timed_call_and_takes_it_out_of_the_median():
    compile_s = {NAMES[0]: 0.25, NAMES[1]: 0.0, NAMES[2]: 0.0}  # the first variant "compiles" in every call

    def variant(name):
        def fn():
            if compile_s[name]:
                jax.monitoring.record_event_duration_secs(timing.COMPILE_EVENT, compile_s[name])
                jax.monitoring.record_event_duration_secs(timing.COMPILE_EVENT, compile_s[name])
            jax.monitoring.record_event_duration_secs("/some/other/event", 9.0)  # not a compile: not counted

        return timing.Variant(fn, (), None, None)

    variants = {name: variant(name) for name in NAMES}
    measured = timing.measure(variants, samples=5, warmup=1, clock=FakeClock([]), block=lambda t: t, progress=None)
    assert measured["sample_compilations"][NAMES[0]] == [{"count": 2, "total_ms": 500.0}] * 5
    assert measured["sample_compilations"][NAMES[1]] == [{"count": 0, "total_ms": 0.0}] * 5
    table = timing.summary(variants, measured)
    assert table[NAMES[0]]["median_ms"] == 1000.0  # one fake second per call
    assert table[NAMES[0]]["sample_compilations"] == {"median_count": 2.0, "median_ms": 500.0}
    assert table[NAMES[0]]["median_less_compile_ms"] == 1000.0 - 2 * 250.0
    assert table[NAMES[1]]["median_less_compile_ms"] == 1000.0


def test_measure_caps_a_slow_variant_to_its_first_rounds():
    calls = []
    variants = {n: timing.Variant(lambda n=n: calls.append(n), (), None, None) for n in NAMES}
    measured = timing.measure(variants, samples=7, warmup=1, block=lambda t: t, progress=None, caps={NAMES[0]: 3})
    assert {n: len(s) for n, s in measured["samples_ms"].items()} == {NAMES[0]: 3, NAMES[1]: 7, NAMES[2]: 7}
    timed = calls[3:]  # after one warm-up call each
    rounds = timing.rotations(NAMES, 7)
    assert timed == [n for i, r in enumerate(rounds) for n in r if n != NAMES[0] or i < 3]


def numpy_update(x, y, m, w, v, lr=0.03, decay=0.8):
    """Masked mean gradient with momentum, straight from the course formulas, in float64."""
    x, y, w, v = (np.asarray(a, np.float64) for a in (x, y, w, v))
    keep = np.asarray(m) > 0
    r = x[keep] @ w - y[keep]
    grad = 2 * x[keep].T @ r / keep.sum()
    v = decay * v + grad
    return w - lr * v, v, r @ r / keep.sum(), grad


@pytest.fixture(scope="module")
def built(mesh, data):
    host = timing.inputs(data, mesh)
    return host, timing.build(host, mesh)


@pytest.mark.slow  # every variant compiled: make test's, not the inner loop's
def test_build_compiles_explicitly_and_every_variant_matches_numpy(built, data):
    host, variants = built
    assert list(variants) == NAMES
    assert host["mask"].sum() == len(data.targets) and len(host["mask"]) % 4 == 0
    assert variants["eager_4dev"].compile_ms is None and variants["eager_4dev"].lower_ms is None
    for name in ("compiled_4dev", "compiled_1dev"):
        assert isinstance(variants[name].fn, jax.stages.Compiled)
        assert variants[name].compile_ms > 0 and variants[name].lower_ms > 0
    assert len(variants["compiled_4dev"].args[0].sharding.device_set) == 4
    assert len(variants["compiled_1dev"].args[0].sharding.device_set) == 1
    expected = numpy_update(host["features"], host["targets"], host["mask"], host["weights"], host["momentum"])
    for name, (fn, args, _, _) in variants.items():
        for got, want in zip(fn(*args), expected):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5, err_msg=name)
    errors = timing.check(variants, host)
    assert set(errors) == set(NAMES) and max(errors.values()) < 1e-4


@pytest.mark.slow  # compiles every variant
def test_a_wrong_variant_is_refused_before_any_timing(mesh, data):
    def wrong(mesh, learning_rate, decay, compiled=True):
        return sl.make_step(mesh, 2 * learning_rate, decay, compiled=compiled)

    host = timing.inputs(data, mesh)
    with pytest.raises(VariantMismatchError, match="eager_4dev: weights differs .* nothing was timed"):
        timing.check(timing.build(host, mesh, wrong), host)  # the check that stands before every measurement


def test_summary_keeps_every_sample_and_ratios_of_medians(built):
    _, variants = built
    samples = {"eager_4dev": [9.0, 7.0, 8.0], "compiled_4dev": [2.0, 4.0, 3.0], "compiled_1dev": [1.0, 1.5, 0.5]}
    result = timing.summary(variants, {"order": timing.rotations(NAMES, 3), "samples_ms": samples})
    assert {n: result[n]["samples_ms"] for n in NAMES} == samples
    assert result["ratios"] == {"compiled_4dev_over_compiled_1dev": 3.0, "eager_4dev_over_compiled_4dev": 8.0 / 3.0}
    assert "no sampling, no placement" in result["boundary"]


# --- trace ----------------------------------------------------------------------------------


def perfetto_durations(path):
    """{annotation: [ms, ...]} read directly from the gzipped Perfetto JSON."""
    with gzip.open(path, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    found = {name: [] for name in trace.ANNOTATIONS}
    for event in sorted((e for e in events if e.get("name") in found), key=lambda e: e["ts"]):
        found[event["name"]].append(event["dur"] / 1e3)
    return found


@pytest.fixture(scope="module")
def captured(tmp_path_factory, mesh, data):
    """Two traced transitions of the teaching fixture with batch 23 (each reshuffles), and a control run."""
    step = sl.make_step(mesh)
    state = sl.initial(17, data, mesh)
    state, _, _ = sl.transition(state, data, 23, step, mesh)  # compile; use up epoch 0
    logdir = tmp_path_factory.mktemp("trace")
    (traced, log), files = trace.capture(logdir, lambda: trace.traced_transitions(state, data, 23, step, mesh, 2))
    control, current = [], state
    for _ in range(2):
        current, loss, ids = sl.transition(current, data, 23, step, mesh)
        control.append((current, loss, ids))
    return logdir, files, traced, log, control


def test_traced_transitions_equal_plain_transitions(captured):
    _, _, traced, log, control = captured
    for entry, (state, loss, ids) in zip(log, control):
        np.testing.assert_array_equal(entry["ids"], ids)
        assert entry["loss"] == loss and entry["step"] == state["step"]
        assert entry["reshuffled"]
    np.testing.assert_array_equal(np.asarray(traced["weights"]), np.asarray(control[-1][0]["weights"]))
    np.testing.assert_array_equal(traced["order"], control[-1][0]["order"])


def test_durations_come_from_the_trace_files(captured):
    logdir, files, *_ = captured
    assert files == trace.find_files(logdir)
    assert files.xplane.name == "shardlab.xplane.pb" and files.perfetto.name == "perfetto_trace.json.gz"
    rows = trace.annotation_durations(logdir)
    direct = perfetto_durations(files.perfetto)
    assert [r["transition"] for r in rows] == [1, 2]
    for name in trace.ANNOTATIONS:
        np.testing.assert_allclose([r[f"{name}_ms"] for r in rows], direct[name], atol=1e-6)
    for r in rows:
        assert 0 < r["prepare_and_place_ms"] + r["compiled_update_and_wait_ms"] <= r["sharded_learner_step_ms"]
    assert rows[0]["start_ms"] == 0 < rows[1]["start_ms"]
    # the XPlane reading alone gives the same events as the Perfetto reading alone
    assert trace.xplane_events(files.xplane) == trace.perfetto_events(files.perfetto)


def test_breakdown_parts_add_up(captured):
    _, files, *_ = captured
    for row in trace.breakdown(files):
        parts = row["jitted_dispatch_ms"] + row["placement_ms"] + row["other_ms"]
        assert row["placement_ms"] > 0 and row["jitted_dispatch_ms"] > 0
        assert parts == pytest.approx(row["prepare_and_place_ms"])
        assert any("shuffle" in name for name in row["dispatched"]), "each traced transition reshuffles"


def test_breakdown_lists_every_jitted_call_in_the_order_it_started(monkeypatch):
    # one thread: the annotation, three jitted calls (one function twice, listed out of order; b recorded at two
    # levels, an event inside an event of the same call), one placement
    events = [("PjitFunction(a)", 500, 600), (trace.PREPARE, 0, 1000), ("PjitFunction(b)", 300, 400)]
    events += [("PjitFunction(b)", 310, 390)]
    events += [("PjitFunction(a)", 100, 200), ("shard_args", 700, 800), ("PjitFunction(c)", 1200, 1300)]
    monkeypatch.setattr(trace, "xplane_lines", lambda path: iter([("python", events)]))
    (row,) = trace.breakdown(trace.TraceFiles("x.xplane.pb", "x.json.gz"))
    assert row["dispatched"] == ["PjitFunction(a)", "PjitFunction(b)", "PjitFunction(a)"]  # c is outside
    assert row["jitted_dispatch_ms"] == pytest.approx(300 / 1e6) and row["placement_ms"] == pytest.approx(100 / 1e6)
    assert row["other_ms"] == pytest.approx((1000 - 300 - 100) / 1e6)


def test_covered_counts_nested_time_once():
    assert trace.covered([(0, 10), (2, 5), (8, 12), (20, 21)]) == 13


def test_files_that_disagree_are_refused(captured, tmp_path):
    _, files, *_ = captured
    with gzip.open(files.perfetto, "rt") as handle:
        body = json.load(handle)
    victim = next(e for e in body["traceEvents"] if e.get("name") == trace.UPDATE)
    victim["dur"] += 500.0  # half a millisecond, in µs
    damaged = tmp_path / "perfetto_trace.json.gz"
    with gzip.open(damaged, "wt") as handle:
        json.dump(body, handle)
    with pytest.raises(TraceError, match="XPlane and Perfetto differ by 0.5000 ms"):
        trace.annotation_durations(trace.TraceFiles(files.xplane, damaged))


def test_a_missing_annotation_is_named(tmp_path, mesh, data):
    step = sl.make_step(mesh)
    state = sl.initial(29, data, mesh)

    def without_update():
        with jax.profiler.TraceAnnotation(trace.STEP):
            with jax.profiler.TraceAnnotation(trace.PREPARE):
                _, batch = sl.next_batch(state, data, 10, mesh)
            jax.block_until_ready(step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"]))

    trace.capture(tmp_path, without_update)
    with pytest.raises(TraceError, match="transition 1: expected one 'compiled_update_and_wait' .* found 0"):
        trace.annotation_durations(tmp_path)


def test_no_transition_annotation_and_no_files_are_named(tmp_path):
    with pytest.raises(TraceError, match="no 'sharded_learner_step' annotation"):
        trace.transitions([(trace.PREPARE, 0, 5)])
    with pytest.raises(TraceError, match="no trace files"):
        trace.find_files(tmp_path)


def test_capture_refuses_to_mix_captures(captured, tmp_path):
    logdir, files, *_ = captured
    with pytest.raises(TraceError, match="already holds a capture"):
        trace.capture(logdir, lambda: None)
    shutil.copytree(logdir, tmp_path / "copy")
    _, again = trace.capture(tmp_path / "copy", lambda: None, replace=True)
    assert again.xplane.is_file() and again.perfetto.is_file()


def test_dominant_is_computed_from_medians():
    rows = [{"prepare_and_place_ms": p, "compiled_update_and_wait_ms": u} for p, u in [(3, 1), (1, 2), (5, 2)]]
    found = trace.dominant(rows)
    assert {k: found[k] for k in ("dominant", "median_prepare_and_place_ms", "median_compiled_update_and_wait_ms")} == {
        "dominant": "prepare_and_place",
        "median_prepare_and_place_ms": 3.0,
        "median_compiled_update_and_wait_ms": 2.0,
    }
    assert found["factor"] == 1.5 and found["transitions"] == 3 and found["prepare_longer_in"] == 2
    # by hand, linear interpolation: preparation 1, 3, 5 -> 2 and 4; update 1, 2, 2 -> 1.5 and 2
    assert (found["q1_prepare_and_place_ms"], found["q3_prepare_and_place_ms"]) == (2.0, 4.0)
    assert (found["q1_compiled_update_and_wait_ms"], found["q3_compiled_update_and_wait_ms"]) == (1.5, 2.0)
    assert found["outliers"] == [] and found["outlier_count"] == 0  # 5 is not beyond twice the median 3
    (beyond,) = trace.dominant([*rows, {"prepare_and_place_ms": 3, "compiled_update_and_wait_ms": 9}])["outliers"]
    assert beyond == {"transition": 4, "annotation": "compiled_update_and_wait", "ms": 9.0, "median_ms": 2.0}


TRANSITIONS = [
    {"prepare_and_place_ms": p, "compiled_update_and_wait_ms": u} for p, u in ((1.0, 3.0), (1.2, 2.8), (0.9, 3.2))
]


def test_a_hypothesis_names_a_change_of_the_menu_with_a_threshold_within_what_it_shortens():
    from shardlab.errors import UsageError
    from shardlab.evidence.hypothesis import MENU, menu, stated

    # by hand: the most each change can remove is the median of the annotation it shortens, 1.0 and 3.0 ms
    medians = {row["change"]: row["median ms"] for row in menu(TRANSITIONS)}
    assert medians == {"one_call_reshuffle": pytest.approx(1.0), "packed_psum": pytest.approx(3.0)}
    assert [row["change"] for row in menu(TRANSITIONS)] == sorted(MENU, key=list(MENU).index)
    # by hand, linear quartiles of three values: preparation 0.95–1.1 ms, update 2.9–3.1 ms, each beside its control
    halves = {row["change"]: (row["middle half ms"], row["control's middle half ms"]) for row in menu(TRANSITIONS)}
    preparation, update = "0.950–1.100", "2.900–3.100"
    assert halves == {"one_call_reshuffle": (preparation, update), "packed_psum": (update, preparation)}
    mine = stated({"change": "one_call_reshuffle", "threshold_ms": 0.15, "because": "dispatch"}, TRANSITIONS)
    assert (mine["annotation"], mine["control"]) == (trace.PREPARE, trace.UPDATE)
    assert mine["baseline_ms"] == pytest.approx(1.0) and "reach_ms" not in mine
    psum = stated({"change": "packed_psum", "threshold_ms": 3.0, "because": "the update"}, TRANSITIONS)
    assert (psum["annotation"], psum["control"], psum["baseline_ms"]) == (trace.UPDATE, trace.PREPARE, 3.0)
    example = stated({"change": "packed_psum", "threshold_ms": 1.0, "because": "x"}, TRANSITIONS, "the example")
    assert example["text"].startswith("The example. Change:") and example["whose"] == "the example"
    for bad in (
        {"change": "use more devices", "threshold_ms": 0.1, "because": "x"},
        {"change": "packed_psum", "threshold_ms": 0.0, "because": "x"},
        {"change": "packed_psum", "threshold_ms": True, "because": "x"},
        {"change": "packed_psum", "threshold_ms": float("nan"), "because": "x"},
        {"change": "one_call_reshuffle", "threshold_ms": 1.01, "because": "x"},  # more than the whole it shortens
        {"change": "packed_psum", "threshold_ms": 3.01, "because": "x"},
        {"change": "packed_psum", "threshold_ms": 1.0, "because": "  "},
        {"change": "packed_psum", "threshold_ms": 1.0},
        "packed_psum",
    ):
        with pytest.raises(UsageError):
            stated(bad, TRANSITIONS)


def rows(prepare, update):
    return [{"prepare_and_place_ms": p, "compiled_update_and_wait_ms": u} for p, u in zip(prepare, update)]


def test_a_cut_larger_than_its_whole_target_while_the_control_drifts_is_not_confirmed():
    """The course run's case: a 0.53 ms cut, the change's whole target 0.24 ms, the untouched annotation 0.37 ms off."""
    from shardlab.evidence.hypothesis import judge

    guess = {"annotation": trace.PREPARE, "control": trace.UPDATE, "threshold_ms": 0.12}
    before = rows([1.53] * 4, [1.00] * 4)
    after = rows([1.00] * 4, [0.63] * 4)
    found = judge(guess, before, after)
    assert found["cut_ms"] == pytest.approx(0.53) and found["control_drift_ms"] == pytest.approx(0.37)
    assert found["verdict"] == "inconclusive" and not found["confirmed"]
    assert found["inconclusive_because"] == "drift_beyond_threshold"  # 0.37 ms of drift against a 0.12 ms effect
    # the control drifting by more than the threshold is inconclusive even when the cut clears threshold + noise
    found = judge({**guess, "threshold_ms": 0.1}, before, rows([0.5] * 4, [0.85] * 4))
    assert found["cut_ms"] - found["noise_ms"] >= 0.1 and found["control_drift_ms"] == pytest.approx(0.15)
    assert (found["verdict"], found["inconclusive_because"]) == ("inconclusive", "drift_beyond_threshold")
    # the control still: the same cut confirmed, every value read from this one capture
    found = judge({**guess, "threshold_ms": 0.1}, before, rows([1.00] * 4, [1.00] * 4))
    assert found["confirmed"] and found["reach_ms"] == pytest.approx(1.53)
    # a control drifting by less than the threshold: the cut is still confirmed
    found = judge({**guess, "threshold_ms": 0.2}, before, rows([1.00] * 4, [0.95] * 4))
    assert found["control_drift_ms"] == pytest.approx(0.05) and found["verdict"] == "confirmed"


def test_the_verdict_reads_the_cut_against_the_noise_and_the_threshold():
    from shardlab.evidence.hypothesis import judge

    guess = {"annotation": trace.PREPARE, "control": trace.UPDATE, "threshold_ms": 0.2}
    before = rows([2.0, 2.1, 1.9, 2.0, 2.05], [3.0, 3.1, 2.9, 3.0, 3.0])
    clear = judge(guess, before, rows([1.6, 1.65, 1.55, 1.6, 1.6], [3.0, 3.05, 2.95, 3.0, 3.0]))
    iqr = max(np.subtract(*np.percentile(v, [75, 25])) for v in ([2.0, 2.1, 1.9, 2.0, 2.05], [3.0, 3.1, 2.9, 3.0, 3.0]))
    assert clear["spread_ms"] == pytest.approx(iqr / 2) and clear["cut_ms"] == pytest.approx(0.4)
    assert clear["cut_ms"] - clear["noise_ms"] >= 0.2 and clear["verdict"] == "confirmed" and clear["confirmed"]
    small = judge(guess, before, rows([1.95, 2.0, 1.85, 1.95, 2.0], [3.0, 3.1, 2.9, 3.0, 3.0]))
    assert small["cut_ms"] + small["noise_ms"] < 0.2 and small["verdict"] == "refuted"
    near = judge(guess, before, rows([1.8, 1.85, 1.75, 1.8, 1.8], [3.0, 3.1, 2.9, 3.0, 3.0]))
    assert near["verdict"] == "inconclusive"  # 0.2 ms cut, 0.05 ms noise: the threshold inside cut ± noise
    assert near["inconclusive_because"] == "threshold_within_noise"


def test_the_verdict_table_shows_the_threshold_beside_the_noise_and_a_margin_inside_it_is_inconclusive():
    from shardlab.evidence.hypothesis import judge, verdict_rows

    guess = {"annotation": trace.PREPARE, "control": trace.UPDATE, "threshold_ms": 0.3}
    # a cut 0.004 ms past the threshold, with a spread of about 0.156 ms: not confirmed
    target_before = [1.7, 1.844, 2.0, 2.156, 2.3]
    target_after = [v - 0.304 for v in target_before]
    found = judge(guess, rows(target_before, [3.0] * 5), rows(target_after, [3.0] * 5))
    assert found["spread_ms"] == pytest.approx((2.156 - 1.844) / 2)
    cut = np.median(target_before) - np.median(target_after)
    assert found["margin_ms"] == pytest.approx(cut - 0.3) == pytest.approx(0.004)
    assert found["noise_ms"] > abs(found["margin_ms"]) and found["verdict"] == "inconclusive"
    shown = {row["medians, ms (middle half)"].split(":")[0]: row["unchanged − changed"] for row in verdict_rows(found)}
    assert shown["target"] == f"cut {cut:.3f}" and shown["control"] == "drift 0.000"
    assert shown["noise"] == f"threshold 0.300, noise {found['noise_ms']:.3f}"


def test_the_one_call_reshuffle_draws_what_the_course_idiom_draws():
    from shardlab.evidence.hypothesis import one_call_draw

    for seed, n in ((17, 23), (2**31 - 1, 1023)):
        key = np.asarray(jax.random.PRNGKey(seed), np.uint32)
        kept, sub = jax.random.split(key)
        new_key, order = one_call_draw(key, n)
        np.testing.assert_array_equal(new_key, np.asarray(kept))
        np.testing.assert_array_equal(order, np.asarray(jax.random.permutation(sub, n)))
        assert new_key.dtype == np.uint32 and order.dtype == np.int32


@pytest.mark.parametrize("change", ["one_call_reshuffle", "packed_psum"])
def test_each_change_continues_the_same_run_bit_for_bit(change, mesh, data):
    """The gate stage 4 applies: ids, losses and all six fields identical to the unchanged loop, across epochs."""
    from shardlab.core.batch import next_batch
    from shardlab.core.state import initial, transition
    from shardlab.core.update import make_step
    from shardlab.evidence.hypothesis import changed_loop

    changed_next_batch, changed_step = changed_loop(change, mesh, next_batch, make_step)
    step = make_step(mesh)
    a = b = initial(5, data, mesh)
    for _ in range(9):  # batch 10 on 23 rows: three epochs, two reshuffles
        a, loss_a, ids_a = transition(a, data, 10, step, mesh)
        b, batch = changed_next_batch(b, data, 10, mesh)
        weights, momentum, loss_b, _ = changed_step(
            batch.features, batch.targets, batch.mask, b["weights"], b["momentum"]
        )
        b = {**b, "weights": weights, "momentum": momentum, "step": b["step"] + 1}
        np.testing.assert_array_equal(batch.ids, ids_a)
        assert float(loss_b) == loss_a
    for field in a:
        np.testing.assert_array_equal(np.asarray(b[field]), np.asarray(a[field]), err_msg=field)


def test_each_traced_transition_is_a_numbered_profiler_step(captured):
    """XProf's overview and step views need step markers: a step_num stat on each outer annotation."""
    _, files, _, log, _ = captured
    profile = jax.profiler.ProfileData.from_file(str(files.xplane))
    numbers = [
        dict(event.stats).get("step_num")
        for plane in profile.planes
        for line in plane.lines
        for event in sorted(line.events, key=lambda e: e.start_ns)
        if event.name == trace.STEP
    ]
    assert numbers == [entry["step"] for entry in log]  # the step each transition completed


def test_a_capture_folder_is_replaced_after_a_killed_capture_and_foreign_files_stay_refused(tmp_path):
    from shardlab import outdir
    from shardlab.errors import OutputFolderError

    logdir = tmp_path / "trace"
    outdir.owned_folder(logdir, trace.CAPTURE, trace.OWNS)  # what capture records before the profiler writes
    stray = logdir / "plugins" / "profile" / "2026_01_01_00_00_00"  # a profiler killed before the rename
    stray.mkdir(parents=True)
    (stray / "host.xplane.pb").write_bytes(b"half a capture")
    _, files = trace.capture(logdir, lambda: None, replace=True)
    assert sorted(p.name for p in (logdir / "plugins" / "profile").iterdir()) == [trace.RUN]
    (files.xplane.parent / "viewer.cache").write_text("a trace viewer's cache beside the capture")
    _, files = trace.capture(logdir, lambda: None, replace=True)
    assert not (files.xplane.parent / "viewer.cache").exists() and files.xplane.is_file()
    (logdir / "notes.txt").write_text("mine")
    with pytest.raises(OutputFolderError, match="notes.txt"):
        trace.capture(logdir, lambda: None, replace=True)
    assert (logdir / "notes.txt").read_text() == "mine" and files.xplane.is_file()


def test_the_judge_bounds_the_threshold_by_the_unchanged_target_of_its_own_capture():
    from shardlab.evidence.hypothesis import judge

    guess = {"annotation": trace.PREPARE, "control": trace.UPDATE, "threshold_ms": 0.2, "baseline_ms": 1.58}
    before = rows([1.75, 1.63, 1.79, 1.76], [3.0] * 4)
    found = judge(guess, before, rows([1.17, 1.14, 1.24, 1.17], [3.0] * 4))
    assert found["reach_ms"] == pytest.approx(np.median([1.75, 1.63, 1.79, 1.76]))
    assert found["baseline_first_ms"] == pytest.approx(1.58) and found["verdict"] == "confirmed"
    beyond = judge({**guess, "threshold_ms": 1.8}, before, rows([0.1] * 4, [3.0] * 4))
    assert (beyond["verdict"], beyond["inconclusive_because"]) == ("inconclusive", "threshold_beyond_reach")


def test_own_times_follow_the_nesting_and_add_up_to_the_busy_time():
    from shardlab.perf.profile import exclusive

    # A holds B (which holds C) and D; E stands alone; F starts inside A and runs past its end
    events = [("A", 0, 100), ("B", 10, 40), ("C", 20, 30), ("D", 50, 60), ("E", 120, 130), ("F", 90, 110)]
    found = {row["name"]: row for row in exclusive(events)}
    assert {n: r["inside"] for n, r in found.items()} == {"A": None, "B": "A", "C": "B", "D": "A", "E": None, "F": "A"}
    # by hand: A 100 - B 30 - D 10 - the 10 of F inside A = 50; B 30 - C 10 = 20; F keeps its whole 20
    assert {n: r["own"] for n, r in found.items()} == {"A": 50, "B": 20, "C": 10, "D": 10, "E": 10, "F": 20}
    assert sum(r["own"] for r in found.values()) == 120  # busy: 0-110 and 120-130


def test_the_verdict_reads_the_parts_the_change_touches_not_the_whole_annotation():
    from shardlab.evidence.hypothesis import judge, quantities, stated, with_parts

    def parts(dispatch, placement, other, update):
        return {
            "prepare_and_place_ms": dispatch + placement + other,
            "jitted_dispatch_ms": dispatch,
            "placement_ms": placement,
            "other_ms": other,
            "compiled_update_and_wait_ms": update,
        }

    first = [parts(0.5, 0.4, 1.1, 1.0)] * 4
    read = quantities("one_call_reshuffle", first)
    assert read["target_keys"] == ["jitted_dispatch_ms", "other_ms"]
    assert read["control_keys"] == ["compiled_update_and_wait_ms", "placement_ms"]
    guess = stated({"change": "one_call_reshuffle", "threshold_ms": 0.3, "because": "the draw"}, first)
    assert guess["baseline_ms"] == pytest.approx(1.6)  # 0.5 + 1.1, not the whole 2.0
    unchanged = [parts(0.5, 0.4, 1.1, 1.0)] * 4
    # the whole annotation falls by 0.5 ms, all of it in placement, which the change does not touch
    elsewhere = judge(guess, unchanged, [parts(0.5, 0.0, 1.0, 1.0)] * 4)
    assert elsewhere["cut_ms"] == pytest.approx(0.1) and elsewhere["control_drift_ms"] == pytest.approx(0.4)
    assert not elsewhere["confirmed"]
    # the same 0.5 ms cut in the parts the draw occupies, the dispatches 0.3 ms of it: confirmed
    there = judge(guess, unchanged, [parts(0.2, 0.4, 0.9, 1.0)] * 4)
    assert there["cut_ms"] == pytest.approx(0.5) and there["confirmed"]
    assert there["mechanism_verdict"] == "supported"
    # the dispatches only 0.2 ms of it, short of the 0.3 ms threshold by more than the noise (none here: every
    # transition is the same): the effect confirmed, the mechanism not supported, each judged on its own
    short = judge(guess, unchanged, [parts(0.3, 0.4, 0.8, 1.0)] * 4)
    assert short["cut_ms"] == pytest.approx(0.5) and short["verdict"] == "confirmed"
    assert short["noise_ms"] == pytest.approx(0.0) and 0.2 + 0.0 < 0.3
    assert short["mechanism_verdict"] == "not supported"
    # the baseline shrank since the first trace below the threshold: inconclusive, not refuted
    small = [parts(0.1, 0.4, 0.15, 1.0)] * 4
    moved = judge(guess, small, [parts(0.1, 0.4, 0.1, 1.0)] * 4)
    assert (moved["verdict"], moved["inconclusive_because"]) == ("inconclusive", "threshold_beyond_reach")
    assert with_parts([{"a_ms": 1.0}], [{"b_ms": 2.0, "dispatched": ["x"]}]) == [{"a_ms": 1.0, "b_ms": 2.0}]


def test_a_device_event_s_whole_time_never_exceeds_its_thread_s_busy_time(monkeypatch):
    from types import SimpleNamespace

    from shardlab.perf import profile

    # one device thread: an Execute holding a loop that holds another Execute (same name, nested), then a psum
    events = [("ThunkExecutor::Execute", 0, 1000), ("while.1", 100, 900), ("ThunkExecutor::Execute", 200, 800)]
    events.append(("psum_invariant.7", 1200, 1500))
    monkeypatch.setattr(profile.trace, "xplane_lines", lambda _: [("tf_XLACpuClient/0", events)])
    (thread,) = profile.device_events(SimpleNamespace(xplane=None), windows=[("after", 0, 2000)])
    rows = {row["name"]: row for row in thread["own"]}
    # by hand: the two Executes cover 0-1000 once (their durations sum to 1600), the thread 0-1000 and 1200-1500
    assert thread["by_loop"]["after"]["busy_ms"] == pytest.approx(1300e-6)
    assert rows["ThunkExecutor::Execute"]["ms"] == pytest.approx(1000e-6)
    assert rows["ThunkExecutor::Execute"]["own_ms"] == pytest.approx((100 + 100 + 600) * 1e-6)  # less the while
    assert all(row["ms"] <= thread["by_loop"]["after"]["busy_ms"] for row in thread["own"])
    assert sum(row["own_ms"] for row in thread["own"]) == pytest.approx(1300e-6)


def test_a_capture_of_two_alternating_loops_splits_back_into_each_loops_transitions():
    from shardlab.errors import UsageError
    from shardlab.evidence.hypothesis import split_capture

    # four transitions alternating u, c, u, c; each breakdown marked by its position in the capture
    rows = {"u": [{"a_ms": 1.0}, {"a_ms": 3.0}], "c": [{"a_ms": 2.0}, {"a_ms": 4.0}]}
    capture = {"order": ["u", "c", "u", "c"], "rows": rows}
    parts = [{"p_ms": float(10 * i), "dispatched": []} for i in range(4)]
    found = split_capture(capture, parts)
    assert found["u"]["breakdown"] == [parts[0], parts[2]] and found["c"]["breakdown"] == [parts[1], parts[3]]
    assert found["u"]["rows"] == [{"a_ms": 1.0, "p_ms": 0.0}, {"a_ms": 3.0, "p_ms": 20.0}]
    assert found["c"]["rows"] == [{"a_ms": 2.0, "p_ms": 10.0}, {"a_ms": 4.0, "p_ms": 30.0}]
    with pytest.raises(UsageError, match="not one capture"):
        split_capture(capture, parts[:3])
