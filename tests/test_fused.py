"""The fused loop replays the course loop: the same IDs and sampler fields bit for bit, the same update to float32.

Correctness only, nothing is timed. The control is always the course loop (`sl.transition`
in a Python loop) from the same seed; the sampler property is checked against the host
sampler (`sl.advance`) and, for the orders, against the split-then-permute idiom written out.
"""

import json
import subprocess
import sys

import jax
import numpy as np
import pytest
from conftest import course_run
from hypothesis import given, settings
from hypothesis import strategies as st

import shardlab as sl
from rig.bench import sweep
from shardlab.errors import ConfigError
from shardlab.perf import costmodel, device_sampler, fused

pytestmark = pytest.mark.stage4

# float32 tolerance of losses, weights and momentum against the course loop (relative, with a small floor).
# The statistics loop takes the loss as w.A.w - 2 w.b + c, a difference of terms of the size of the
# targets' mean square, so its loss error is bounded relative to that scale, not to the loss.
# Observed maxima (teaching and timing fixtures, 3 epochs): see docs/fused-loop.md.
RTOL, ATOL = 1e-4, 1e-5
STATS_LOSS_SCALE = 1e-5  # stats loss: |error| <= RTOL |loss| + STATS_LOSS_SCALE * mean(targets**2)
EXACT = [name for name, v in costmodel.VARIANTS.items() if v.exact]  # every variant with right numbers


def to_host(sampler) -> dict:
    """The schema's host form of the sampler fields (device arrays or fetched ones): key, order, cursor int."""
    key, order, cursor = jax.device_get(tuple(sampler))
    return {
        "key": np.asarray(key, sl.schema.DTYPES["key"]),
        "order": np.asarray(order, sl.schema.DTYPES["order"]),
        "cursor": int(cursor),
    }


def trim(ids) -> np.ndarray:
    """The batch's IDs from one row of slot IDs: the valid ones, in order (padding is always last)."""
    ids = np.asarray(ids)
    return ids[ids != device_sampler.EMPTY].astype(sl.schema.DTYPES["order"])


def one_step(sampler, batch_size, slots):
    """One step of the device sampler: the fused loop's `device_sampler.plan` for K = 1, its one row of slots."""
    after, rows = device_sampler.plan(sampler, batch_size, slots, 1, 1)
    return after, device_sampler.Slots(rows.ids[0], rows.mask[0])


def epochs_of_steps(rows, batch_size, epochs=3):
    return epochs * len(sl.epoch_batches(rows, batch_size))


def assert_same_sampler(got, want):
    got, want = sl.host_copy(got), sl.host_copy(want)
    for field in sl.schema.SAMPLER:
        np.testing.assert_array_equal(got[field], want[field], err_msg=field)


def assert_holds_host_draw(sampler, host):
    """The device sampler holds the host sampler's key, order and cursor."""
    found = to_host(sampler)
    assert found["cursor"] == host["cursor"]
    np.testing.assert_array_equal(found["key"], host["key"])
    np.testing.assert_array_equal(found["order"], host["order"])


def assert_same_ids(got, want):
    assert len(got) == len(want)
    for index, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == b.dtype == np.int32, index
        np.testing.assert_array_equal(a, b, err_msg=f"step {index}")


def loss_atol(variant, data):
    """ATOL, or for the statistics loops the cancellation bound at the scale of the targets' mean square."""
    if costmodel.VARIANTS[variant].general:
        return ATOL
    return STATS_LOSS_SCALE * float(np.mean(np.square(data.targets, dtype=np.float64)))


def assert_close_update(state, losses, control, control_losses, loss_atol=ATOL):
    np.testing.assert_allclose(losses, control_losses, rtol=RTOL, atol=loss_atol)
    for field in ("weights", "momentum"):
        got, want = np.asarray(state[field]), np.asarray(control[field])
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=field)


WALKS = {"seed": st.integers(0, 2**32 - 1), "rows": st.integers(1, 40), "batch_size": st.integers(1, 50)}


@settings(max_examples=6, deadline=None)
@given(**WALKS, extra=st.integers(0, 5))
@pytest.mark.long  # a fused loop compiled for every drawn case: make test-long's
def test_device_sampler_is_bit_identical_to_the_host_sampler(seed, rows, batch_size, extra):
    """Every seed, dataset size and batch size, over three epochs and a few steps more."""
    steps = epochs_of_steps(rows, batch_size) + extra
    slots = device_sampler.slot_count(batch_size, rows, 4)
    host = sl.initial_sampler(seed, rows)
    start = device_sampler.to_device(host, jax.device_put)

    @jax.jit
    def walk(sampler):
        return jax.lax.scan(lambda s, _: one_step(s, batch_size, slots), sampler, None, length=steps)

    end, batches = walk(start)
    ids, masks = np.asarray(batches.ids), np.asarray(batches.mask)
    for index in range(steps):
        host, want = sl.advance(host, batch_size)
        np.testing.assert_array_equal(trim(ids[index]), want)
        # padding is last, by position: the first len(want) slots are valid, the rest have mask 0
        np.testing.assert_array_equal(masks[index], (np.arange(slots) < len(want)).astype(np.float32))
    assert_holds_host_draw(end, host)


@settings(max_examples=6, deadline=None)
@given(**WALKS, k=st.integers(1, 30), data=st.data())
@pytest.mark.long  # a fused loop compiled for every drawn case: make test-long's
def test_planned_batches_equal_k_host_steps_from_any_cursor(seed, rows, batch_size, k, data):
    """`plan` computes K steps at once (the loops use it): from any cursor, stopping after any `active` <= K."""
    cursor = data.draw(st.integers(0, rows), label="cursor")
    active = data.draw(st.integers(1, k), label="active")
    host = {**sl.initial_sampler(seed, rows), "cursor": cursor}
    slots = device_sampler.slot_count(batch_size, rows, 4)
    plan = jax.jit(device_sampler.plan, static_argnums=(1, 2, 3))
    after, planned = plan(device_sampler.to_device(host, jax.device_put), batch_size, slots, k, active)
    ids, masks = np.asarray(planned.ids), np.asarray(planned.mask)
    for index in range(k):
        host, want = sl.advance(host, batch_size)
        np.testing.assert_array_equal(trim(ids[index]), want)
        np.testing.assert_array_equal(masks[index], (np.arange(slots) < len(want)).astype(np.float32))
        if index == active - 1:
            assert_holds_host_draw(after, host)


@pytest.mark.parametrize("cursor,k", [(0, 3), (21, 3), (23, 30)])
def test_a_plan_matches_the_host_sampler_whether_or_not_its_rows_reach_the_next_epoch(cursor, k):
    """Both branches of the plan's draw: 23 rows in batches of 5 (5 batches an epoch). From cursor 0,
    3 steps stay in the epoch (nothing drawn); from cursor 21 the second step starts the next epoch;
    30 steps from the end of an epoch span six more."""
    rows, batch_size = 23, 5
    host = {**sl.initial_sampler(7, rows), "cursor": cursor}
    slots = device_sampler.slot_count(batch_size, rows, 4)
    plan = jax.jit(device_sampler.plan, static_argnums=(1, 2, 3))
    after, planned = plan(device_sampler.to_device(host, jax.device_put), batch_size, slots, k, k)
    for index in range(k):
        host, want = sl.advance(host, batch_size)
        np.testing.assert_array_equal(trim(np.asarray(planned.ids)[index]), want)
    assert_holds_host_draw(after, host)


def test_device_orders_follow_the_idiom_written_out():
    key = jax.random.PRNGKey(29)
    expected = []
    for _ in range(3):
        key, sub = jax.random.split(key)
        expected.append(np.asarray(jax.random.permutation(sub, 23)))
    sampler = device_sampler.to_device(sl.initial_sampler(29, 23), jax.device_put)
    advance = jax.jit(one_step, static_argnums=(1, 2))
    seen = []
    for _ in range(3):  # batch larger than the dataset: the whole reshuffled dataset each time
        sampler, slots = advance(sampler, 40, 24)
        seen.append(trim(slots.ids))
    for got, want in zip(seen, expected):
        np.testing.assert_array_equal(got, want)


def test_slots_pad_to_the_device_count_and_never_cross_an_epoch():
    assert device_sampler.slot_count(7, 23, 4) == 8
    assert device_sampler.slot_count(40, 23, 4) == 24  # larger than the dataset: the dataset, padded
    sampler = device_sampler.to_device(sl.initial_sampler(17, 23), jax.device_put)
    advance = jax.jit(one_step, static_argnums=(1, 2))
    lengths = []
    for _ in range(5):
        sampler, slots = advance(sampler, 7, 8)
        lengths.append(int(np.asarray(slots.mask).sum()))
    assert lengths == [7, 7, 7, 2, 7]  # 23 rows in batches of 7, then the next epoch


GATES = [("teaching", b) for b in (1, 7, 10, 64, 1023)] + [("timing", b) for b in (10, 64, 1023, 2000)]
# make test gates each variant at one batch size, one per fixture (per_step at batch 1: five dispatches, the last
# partial; stats at batch 64 of the timing fixture: a short last batch in every epoch); make test-long gates the
# others, each a fused loop compiled for it
GATED_IN_MAKE_TEST = {("per_step", "teaching", 1), ("stats", "timing", 64)}


@pytest.fixture(scope="module")
def fixtures_by_name():
    return {"teaching": sl.teaching_fixture(), "timing": sl.timing_fixture()}


@pytest.fixture(scope="module")
def controls(fixtures_by_name, mesh):
    cache = {}

    def control(name, batch_size, seed=17):
        if (name, batch_size) not in cache:
            data = fixtures_by_name[name]
            steps = epochs_of_steps(len(data.targets), batch_size)
            cache[name, batch_size] = (steps, course_run(data, mesh, seed, batch_size, steps))
        return cache[name, batch_size]

    return control


@pytest.mark.slow  # compiles a fused loop per case
@pytest.mark.parametrize(
    "fixture,batch_size,variant",
    [
        pytest.param(*gate, v, marks=[pytest.mark.long] * ((v, *gate) not in GATED_IN_MAKE_TEST))
        for gate in GATES
        for v in ("per_step", "stats")
    ],
)
def test_fused_loop_replays_the_course_loop_over_three_epochs(fixture, batch_size, variant, fixtures_by_name, controls):
    """IDs and sampler fields bit for bit; losses, weights and momentum to float32 tolerance.

    Dispatches of 16 steps, so every run spans several dispatches and a final partial one.
    """
    data = fixtures_by_name[fixture]
    steps, (control, control_losses, control_ids) = controls(fixture, batch_size)
    mesh = sl.make_mesh(4)
    loop = fused.FusedLoop(data, mesh, batch_size, k=16, variant=variant)
    state, losses, ids = loop.run(sl.initial(17, data, mesh), steps)
    assert_same_ids(ids, control_ids)
    assert_same_sampler(state, control)
    assert state["step"] == steps and len(losses) == steps
    assert sl.batch.is_replicated(state["weights"], mesh) and sl.batch.is_replicated(state["momentum"], mesh)
    assert_close_update(state, losses, control, control_losses, loss_atol(variant, data))


@pytest.fixture(scope="module")
def narrow_controls(mesh):
    cache = {}

    def control(width, batch_size):
        if (width, batch_size) not in cache:
            data = sl.fixtures.synthetic(37, width, 5 + width)
            rate = min(sl.config.LEARNING_RATE, 0.5 / width)
            steps = epochs_of_steps(37, batch_size)
            step = sl.make_step(mesh, learning_rate=rate)
            state, losses, ids = sl.initial(17, data, mesh), [], []
            for _ in range(steps):
                state, loss, batch_ids = sl.transition(state, data, batch_size, step, mesh)
                losses.append(loss)
                ids.append(batch_ids)
            cache[width, batch_size] = (data, rate, steps, state, np.asarray(losses, np.float32), ids)
        return cache[width, batch_size]

    return control


SWEPT = [*[v for v in EXACT if v not in ("per_step", "stats")], "no_collective", "auto"]
# the bench sweep's widths, each with a batch size of its own, on a small dataset (the bench gates 1,023 rows itself)
SWEEP_CASES = list(zip(sweep.WIDTHS, (5, 11, 40), strict=True))
# make test replays each variant at one width, the widths taken in turn so that every width is replayed too;
# make test-long replays every other pair, each a fused loop compiled for it
SWEPT_IN_MAKE_TEST = {(v, SWEEP_CASES[i % len(SWEEP_CASES)]) for i, v in enumerate(SWEPT)}
assert {case for _, case in SWEPT_IN_MAKE_TEST} == set(SWEEP_CASES)


@pytest.mark.slow  # compiles a fused loop per case
@pytest.mark.parametrize(
    "variant,width,batch_size",
    [
        pytest.param(v, *case, marks=[pytest.mark.long] * ((v, case) not in SWEPT_IN_MAKE_TEST))
        for case in SWEEP_CASES
        for v in SWEPT
    ],
)
def test_every_variant_replays_the_course_loop_at_the_sweep_widths(variant, width, batch_size, narrow_controls, mesh):
    """IDs and sampler bit for bit over three epochs for every variant; the update too, except for the bound.

    (`per_step` and `stats` replay the course loop above.) Dispatches of 6 steps (several, and a
    partial last one); batch 40 is larger than the 37 rows.
    """
    data, rate, steps, control, control_losses, control_ids = narrow_controls(width, batch_size)
    loop = fused.FusedLoop(data, mesh, batch_size, k=6, variant=variant, learning_rate=rate)
    state, losses, ids = loop.run(sl.initial(17, data, mesh), steps)
    assert_same_ids(ids, control_ids)
    assert_same_sampler(state, control)
    if loop.variant != "no_collective":
        assert_close_update(state, losses, control, control_losses, loss_atol(loop.variant, data))
    else:  # each device updated from its own slots only: the numbers are not the course's
        assert not np.allclose(np.asarray(state["weights"]), np.asarray(control["weights"]), rtol=RTOL, atol=ATOL)


@pytest.mark.slow  # compiles a fused loop per case
@pytest.mark.parametrize("batch_size", [1, 7])
def test_ids_on_the_timing_fixture_at_small_batches(batch_size, fixtures_by_name, mesh):
    """Batches 1 and 7 of the 64-feature fixture diverge with the course's learning rate (0.03 |x|^2 > 1), so
    only the sampler is compared, over three epochs, against `sl.advance` (what the course loop's
    `next_batch` calls); the update is gated on the teaching fixture and the larger batches above."""
    data = fixtures_by_name["timing"]
    steps = epochs_of_steps(len(data.targets), batch_size)
    host, control_ids = sl.initial_sampler(17, len(data.targets)), []
    for _ in range(steps):
        host, ids = sl.advance(host, batch_size)
        control_ids.append(ids)
    state, _, ids = fused.FusedLoop(data, mesh, batch_size, k=512).run(sl.initial(17, data, mesh), steps)
    assert_same_ids(ids, control_ids)
    assert_same_sampler(state, {**state, **host, "step": steps})


@pytest.mark.slow  # a compiled loop per boundary: make test's, not the inner loop's
def test_stops_exactly_at_any_step_boundary(data, mesh):
    """Uneven chunks (1 + 5 + 16 + 3 steps) leave the state the same 25 straight steps leave."""
    loop = fused.FusedLoop(data, mesh, 7, k=16)
    control, control_losses, control_ids = course_run(data, mesh, 17, 7, 25)
    state, losses, ids = sl.initial(17, data, mesh), [], []
    for chunk in (1, 5, 16, 3):
        state, chunk_losses, chunk_ids = loop.run(state, chunk)
        assert state["step"] == len(ids) + chunk
        losses += list(chunk_losses)
        ids += chunk_ids
    assert_same_ids(ids, control_ids)
    assert_same_sampler(state, control)
    assert_close_update(state, np.asarray(losses), control, control_losses, loss_atol(loop.variant, data))
    unchanged, none, no_ids = loop.run(state, 0)
    assert unchanged is state and len(none) == 0 and no_ids == []


@pytest.mark.slow  # compiled loops: make test's, not the inner loop's
def test_one_dispatch_leaves_the_callers_state_untouched(data, mesh):
    loop = fused.FusedLoop(data, mesh, 10, k=8)
    start = sl.initial(29, data, mesh)
    before = sl.host_copy(start)
    loop.run(start, 8)
    after = sl.host_copy(start)
    for field in sl.FIELDS:
        np.testing.assert_array_equal(after[field], before[field], err_msg=field)


def test_bad_step_counts_are_refused(data, mesh):
    loop = fused.FusedLoop(data, mesh, 7, k=4)
    state = sl.initial(17, data, mesh)
    for steps in (-1, 2.5, True):
        with pytest.raises(ConfigError, match="steps must be a non-negative integer"):
            loop.run(state, steps)
    with pytest.raises(ConfigError, match="a dispatch runs 1..4 steps"):
        loop.dispatch(state, 5)
    with pytest.raises(ConfigError, match="steps per dispatch"):
        fused.FusedLoop(data, mesh, 7, k=0)


def test_one_all_reduce_per_step_and_one_per_dispatch(data, mesh):
    """The per-step loop's scan body holds one all-reduce; the statistics loop holds one outside any loop."""
    state = sl.initial(17, data, mesh)
    texts = {}
    for name in ("per_step", "stats"):
        loop = fused.FusedLoop(data, mesh, 7, k=8, variant=name)
        texts[name] = loop.program.lower(*loop.arguments(state, 8)).as_text()
    assert {name: sl.count_all_reduce(text) for name, text in texts.items()} == {"per_step": 1, "stats": 1}
    # per step: the all_reduce sits inside the scan's while body; with statistics it precedes the update loop
    per_step, once = texts["per_step"], texts["stats"]
    assert per_step.index("stablehlo.while") < per_step.index("all_reduce")
    assert once.index("all_reduce") < once.rindex("stablehlo.while")


CHILD = r"""
import json, sys
import numpy as np
import shardlab as sl
from shardlab.perf import fused
sl.setup_devices(4)
path, loop_kind, seed, batch_size, steps, out = sys.argv[1:]
seed, batch_size, steps = int(seed), int(batch_size), int(steps)
data, mesh = sl.teaching_fixture(), sl.make_mesh()
state = sl.restore(path, sl.contract(data, sl.Config(seed=seed, batch_size=batch_size)), mesh)
if loop_kind == "fused":
    state, losses, ids = fused.FusedLoop(data, mesh, batch_size, k=8).run(state, steps)
else:
    step, losses, ids = sl.make_step(mesh), [], []
    for _ in range(steps):
        state, loss, batch_ids = sl.transition(state, data, batch_size, step, mesh)
        losses.append(loss)
        ids.append(batch_ids)
host = sl.host_copy(state)
np.savez(out, losses=np.asarray(losses, np.float32), ids=np.concatenate(ids), lengths=[len(i) for i in ids], **host)
"""


@pytest.mark.slow  # fresh interpreters
@pytest.mark.parametrize(
    "saver,resumer",  # make test moves a checkpoint one way, make test-long the other
    [("fused", "course"), pytest.param("course", "fused", marks=pytest.mark.long)],
)
def test_checkpoints_move_between_the_loops_in_a_fresh_process(saver, resumer, data, mesh, tmp_path):
    """Save from one loop after 5 steps (mid-epoch), resume 20 steps in the other loop in a new interpreter."""
    seed, batch_size, first, more = 29, 7, 5, 20
    control, control_losses, control_ids = course_run(data, mesh, seed, batch_size, first + more)
    start = sl.initial(seed, data, mesh)
    if saver == "fused":
        saved, _, _ = fused.FusedLoop(data, mesh, batch_size, k=4).run(start, first)
    else:
        saved, _, _ = course_run(data, mesh, seed, batch_size, first, start)
    path = sl.save(tmp_path / "ckpt.npz", saved, sl.contract(data, sl.Config(seed=seed, batch_size=batch_size)))
    out = tmp_path / "resumed.npz"
    args = [path, resumer, seed, batch_size, more, out]
    child = subprocess.run([sys.executable, "-c", CHILD, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    found = dict(np.load(out))
    ids = np.split(found["ids"], np.cumsum(found["lengths"])[:-1])
    assert_same_ids([i.astype(np.int32) for i in ids], control_ids[first:])
    resumed = {name: found[name] for name in sl.FIELDS}
    assert_same_sampler(resumed, control)
    assert_close_update(resumed, found["losses"], control, control_losses[first:])
    assert json.loads(json.dumps(int(resumed["step"]))) == first + more


def test_step_ids_are_each_rows_valid_ids_and_join_in_order():
    rng = np.random.default_rng(5)
    parts, rows = [], []
    for _ in range(4):
        ids = rng.integers(0, 50, size=(int(rng.integers(1, 6)), 8)).astype(np.int32)
        for row in ids:
            row[int(rng.integers(1, 9)) :] = device_sampler.EMPTY  # padding is always last
        parts.append(device_sampler.StepIds.of(ids))
        rows += [row[row >= 0] for row in ids]
    joined = device_sampler.StepIds.join(parts)
    assert len(joined) == len(rows) and joined == rows and joined[-1].dtype == np.int32
    assert [list(a) for a in joined[1:3]] == [list(b) for b in rows[1:3]]
    with pytest.raises(IndexError):
        joined[len(rows)]
    assert len(device_sampler.StepIds.join([])) == 0


@pytest.mark.slow  # compiles a fused loop of its own
def test_a_returned_sampler_is_read_only_so_its_device_copy_cannot_go_stale(data, mesh):
    """The loop reuses the device copy of the sampler it returned; an edited copy of the order is placed anew."""
    loop = fused.FusedLoop(data, mesh, 7, k=4)
    state, _, _ = loop.run(sl.initial(17, data, mesh), 2)  # cursor 14 of 23: the next batch is order[14:21]
    with pytest.raises(ValueError):
        state["order"][0] = 0
    edited = {**state, "order": state["order"].copy()}
    edited["order"][[14, 15]] = edited["order"][[15, 14]]
    _, _, ids = loop.run(edited, 1)
    _, _, want = loop.run(state, 1)
    np.testing.assert_array_equal(ids[0], edited["order"][14:21])
    np.testing.assert_array_equal(want[0], state["order"][14:21])
