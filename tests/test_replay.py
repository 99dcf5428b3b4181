"""Stage 3: resume from every step boundary equals the uninterrupted run; faults show where arithmetic says."""

import jax
import numpy as np
import pytest
from conftest import oracle_path

import shardlab as sl
from shardlab.learner import reference as impl
from shardlab.verify import faults, replay, step_fingerprint

pytestmark = pytest.mark.stage3


def control_run(data, mesh, seed, batch_size, steps, folder):
    """The uninterrupted run, written out here, saving a checkpoint at every step boundary (0..steps)."""
    step = sl.make_step(mesh)
    contract = sl.contract(data, sl.Config(seed=seed, batch_size=batch_size))
    state = sl.initial(seed, data, mesh)
    paths = [sl.save(folder / "at-0.npz", state, contract)]
    ids, losses, log = [], [], []
    for k in range(1, steps + 1):
        state, loss, batch_ids = sl.transition(state, data, batch_size, step, mesh)
        ids.append(batch_ids)
        losses.append(loss)
        log.append(step_fingerprint.entry(k, data, batch_ids, np.asarray(state["weights"]), loss))
        paths.append(sl.save(folder / f"at-{k}.npz", state, contract))
    return step, contract, paths, ids, losses, log, sl.host_copy(state)


CASES = {
    "teaching seed17 batch7": (sl.teaching_fixture, 17, 7, 13),  # 4 batches an epoch: 3 epochs + 1 step
    "teaching seed29 batch10": (sl.teaching_fixture, 29, 10, 10),  # 3 batches an epoch
    "timing seed17 batch256": (sl.timing_fixture, 17, 256, 13),  # 1,023 rows: 256, 256, 256, 255
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_resume_from_every_boundary_equals_the_uninterrupted_run(case, mesh, tmp_path):
    make, seed, batch_size, steps = CASES[case]
    data = make()
    rows = data.features.shape[0]
    assert steps * batch_size >= 3 * rows  # the run spans at least three epochs
    step, contract, paths, ids, losses, log, final = control_run(data, mesh, seed, batch_size, steps, tmp_path)
    for k, path in enumerate(paths):
        restored = sl.restore(path, contract, mesh)
        assert restored["step"] == k
        resumed = replay.run(restored, data, batch_size, steps - k, mesh, step)
        assert len(resumed["ids"]) == steps - k
        for a, b in zip(ids[k:], resumed["ids"]):
            np.testing.assert_array_equal(a, b)
        assert list(resumed["losses"]) == losses[k:]  # exact on this CPU
        assert step_fingerprint.first_divergence(log[k:], resumed["log"]) is None, k
        end = sl.host_copy(resumed["state"]) if steps > k else sl.host_copy(restored)
        for name in sl.FIELDS:
            np.testing.assert_array_equal(end[name], final[name], err_msg=f"{case}: resume at {k}, field {name}")


def test_records_survive_the_disk_and_compare_field_by_field(data, mesh, tmp_path):
    step = sl.make_step(mesh)
    record = replay.run(sl.initial(29, data, mesh), data, 10, 8, mesh, step)
    path = replay.save_record(tmp_path / "r.npz", record)
    back = replay.load_record(path)
    for a, b in zip(record["ids"], back["ids"]):
        np.testing.assert_array_equal(a, b)
    assert back["log"] == record["log"]
    diff = replay.compare(record, back)
    assert diff["steps_compared"] == 8 and diff["ids_mismatched"] == 0
    assert all(diff[name] == 0 for name in (*sl.FIELDS, "losses"))
    assert diff["epochs_covered"] == sum(len(i) for i in record["ids"]) / 23
    replay.check_recovery(diff)
    assert replay.ids_mismatched(record["ids"], record["ids"][:-1]) == len(record["ids"][-1])
    swapped = [record["ids"][0][::-1], *record["ids"][1:]]
    assert replay.ids_mismatched(record["ids"], swapped) == 10  # all ten positions of the first batch moved


def test_a_record_of_a_written_out_loop_holds_what_each_step_left(data, mesh):
    """`replay.record` (stage 3b's resume loop) against the states, ids and losses the loop itself saw."""
    step = sl.make_step(mesh)
    state, states, ids, losses = sl.initial(17, data, mesh), [], [], []
    for _ in range(6):  # past the first epoch's end (4 batches of 23 rows in 7s)
        state, loss, batch_ids = sl.transition(state, data, 7, step, mesh)
        states.append(sl.host_copy(state))
        ids.append(batch_ids)
        losses.append(loss)
    found = replay.record(states, ids, losses, data)
    for k in range(6):
        for name in sl.FIELDS:
            np.testing.assert_array_equal(found[name][k], np.asarray(states[k][name]))
        np.testing.assert_array_equal(found["ids"][k], np.asarray(ids[k]))
        assert found["losses"][k] == losses[k]
        weights = np.asarray(states[k]["weights"])
        assert found["log"][k] == step_fingerprint.entry(k + 1, data, ids[k], weights, losses[k])
    assert [int(s) for s in found["step"]] == [1, 2, 3, 4, 5, 6] and int(found["cursor"][-1]) == 14
    with pytest.raises(sl.errors.UsageError, match="one state, ids and loss per step"):
        replay.record(states, ids[:-1], losses, data)


def test_a_changed_sampler_field_fails_the_recovery_check(data, mesh):
    step = sl.make_step(mesh)
    record = replay.run(sl.initial(17, data, mesh), data, 7, 6, mesh, step)
    bent = {**record, "cursor": record["cursor"] + np.eye(1, 6, 4, dtype=np.int64)[0]}
    diff = replay.compare(record, bent)
    assert diff["cursor"] == 1
    with pytest.raises(replay.ReplayMismatchError, match="cursor"):
        replay.check_recovery(diff)


def test_one_ulp_in_one_weight_fails_the_exact_recovery_check(data, mesh):
    """Stage 3b calls check_recovery with no tolerance: the resumed weights must be bit for bit the control's."""
    step = sl.make_step(mesh)
    record = replay.run(sl.initial(17, data, mesh), data, 7, 6, mesh, step)
    weights = np.array(record["weights"], np.float32)
    weights[3, 1] = np.nextafter(weights[3, 1], np.float32(np.inf))  # one float32 step
    diff = replay.compare(record, {**record, "weights": weights})
    assert 0 < diff["weights"] < 1e-6
    with pytest.raises(replay.ReplayMismatchError, match="weights"):
        replay.check_recovery(diff)


def test_the_step_rows_mark_exactly_the_step_a_planted_difference_is_in(data, mesh):
    """A record beside itself is equal at every step; one cursor changed at step 5, or one momentum element at
    step 2, makes that row alone unequal, and only a weight change moves max |Δw|."""
    step = sl.make_step(mesh)
    record = replay.run(sl.initial(17, data, mesh), data, 7, 6, mesh, step)
    rows = replay.step_rows(record, record)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6] and all(r["equal"] for r in rows)
    assert [r["ids"] for r in rows] == [np.asarray(i).tolist() for i in record["ids"]]
    bent = {**record, "cursor": record["cursor"] + np.eye(1, 6, 4, dtype=np.int64)[0]}
    assert [r["equal"] for r in replay.step_rows(record, bent)] == [True] * 4 + [False, True]
    momentum = np.array(record["momentum"], np.float32)
    momentum[1, 0] += 1.0
    rows = replay.step_rows(record, {**record, "momentum": momentum})
    assert [r["equal"] for r in rows] == [True, False] + [True] * 4 and {r["max |Δw|"] for r in rows} == {0.0}
    weights = np.array(record["weights"], np.float32)
    weights[2, 3] += 0.5
    moved = [r["max |Δw|"] for r in replay.step_rows(record, {**record, "weights": weights})]
    assert moved[2] == abs(float(weights[2, 3]) - float(record["weights"][2][3])) > 0.4 and moved.count(0.0) == 5


def test_fingerprints_name_the_first_differing_step(data, mesh):
    step = sl.make_step(mesh)
    state = sl.initial(17, data, mesh)
    a = replay.run(state, data, 7, 6, mesh, step)
    nudged = {**state, "weights": sl.replicate(np.eye(1, 8, 2, dtype=np.float32)[0] * 1e-3, mesh)}
    b = replay.run(nudged, data, 7, 6, mesh, step)
    assert replay.first_divergence(a, b) == {"step": 1, "fields": ["weights"]}
    assert replay.first_divergence(a, a) is None


# ---------- faults, checked against independent arithmetic and a NumPy replay ----------


def sampler_ids(key, order, cursor, batch_size, steps):
    """The ids a sampler with these fields hands out, written out independently of shardlab."""
    out = []
    key, order = np.asarray(key, np.uint32), np.asarray(order)
    for _ in range(steps):
        if cursor >= len(order):
            key, subkey = jax.random.split(key)
            order = np.asarray(jax.random.permutation(subkey, len(order)))
            cursor = 0
        out.append(order[cursor : cursor + batch_size])
        cursor += len(out[-1])
    return out


def numpy_weights(data, ids, weights, momentum):
    """(weights, momentum) after one oracle update per batch of `ids`, in float64."""
    return oracle_path(data, ids, weights, momentum)[1:]


@pytest.fixture(scope="module")
def fault_table(data, mesh, tmp_path_factory):
    return faults.fault_table(impl, data, mesh, tmp_path_factory.mktemp("faults"))


def test_fault_rows_have_the_recorded_shape(fault_table):
    rows, _ = fault_table
    assert len(rows) == 8
    assert {(r["fixture"], r["fault"]) for r in rows} == {
        (f, x) for f in ("seed17_batch7", "seed29_batch10") for x in ("none", "momentum", "cursor", "key")
    }
    keys = {"fixture", "seed", "batch_size", "fault", "max_weight_error", "ids_changed", "first_divergence_step"}
    assert all(set(r) == keys for r in rows)


@pytest.mark.parametrize("fixture,seed,batch_size", [("seed17_batch7", 17, 7), ("seed29_batch10", 29, 10)])
def test_faults_match_independent_replays(fault_table, data, mesh, fixture, seed, batch_size):
    rows, setup = fault_table
    rows = {r["fault"]: r for r in rows if r["fixture"] == fixture}
    n = 23
    per_epoch = -(-n // batch_size)
    saved_at = per_epoch + 1  # one batch into the second epoch
    total = 4 * per_epoch
    after = total - saved_at
    assert setup[fixture]["save_step"] == saved_at and setup[fixture]["cursor"] == batch_size  # mid-epoch

    # the state at the save point, from an independent sampler and NumPy optimiser
    start_key = np.asarray(jax.random.PRNGKey(seed), np.uint32)
    key, sub = jax.random.split(start_key)
    head = sampler_ids(key, np.asarray(jax.random.permutation(sub, n)), 0, batch_size, saved_at)
    key2, sub2 = jax.random.split(key)
    order2 = np.asarray(jax.random.permutation(sub2, n))  # epoch 2's order, drawn at step per_epoch + 1
    w, v = numpy_weights(data, head, np.zeros(8), np.zeros(8))

    control_ids = sampler_ids(key2, order2, batch_size, batch_size, after)
    variants = {
        "none": (key2, batch_size, v),
        "momentum": (key2, batch_size, np.zeros(8)),
        "cursor": (key2, 0, v),
        "key": (start_key, batch_size, v),
    }
    control_w, _ = numpy_weights(data, control_ids, w, v)
    rest = -(-(n - batch_size) // batch_size)  # batches left in the saved epoch
    expected_step = {"none": None, "momentum": saved_at + 1, "cursor": saved_at + 1, "key": saved_at + rest + 1}
    for fault, (k, cursor, momentum) in variants.items():
        ids = sampler_ids(k, order2, cursor, batch_size, after)
        changed = any(not np.array_equal(a, b) for a, b in zip(ids, control_ids))
        error = float(np.max(np.abs(numpy_weights(data, ids, w, momentum)[0] - control_w)))
        row = rows[fault]
        assert row["ids_changed"] == changed, fault
        assert row["first_divergence_step"] == expected_step[fault], fault
        np.testing.assert_allclose(row["max_weight_error"], error, atol=2e-5, err_msg=fault)
        if fault == "none":
            assert row["max_weight_error"] == 0.0 and not changed
        else:
            assert row["max_weight_error"] > 1e-3, fault
    # the key fault's first resumed steps are identical: one matching next step proves nothing
    key_ids = sampler_ids(start_key, order2, batch_size, batch_size, after)
    assert all(np.array_equal(a, b) for a, b in zip(key_ids[:rest], control_ids[:rest]))
    assert not np.array_equal(key_ids[rest], control_ids[rest])
    assert setup[fixture]["key_fault_first_step_matches"]


def test_boundary_arithmetic():
    assert replay.boundary(23, 7, 7, 5) == 9  # 16 ids left in sevens: 3 batches, then a new epoch
    assert replay.boundary(23, 10, 10, 4) == 7
    assert replay.boundary(23, 23, 7, 8) == 9  # a used-up epoch reshuffles on the very next step


def test_the_fault_table_resets_what_the_injection_it_is_given_resets(data, mesh, tmp_path):
    """A notebook passes its own `careless`: the table must run that one. An injection that resets only the cursor,
    whatever the fault, makes every faulty row the cursor row of the default table (and `none` stays exact)."""
    only_cursor = {"seed29_batch10": (29, 10)}

    def cursor_always(state, fault, seed, mesh):
        return dict(state) if fault == "none" else {**state, "cursor": 0}

    rows, _ = faults.fault_table(impl, data, mesh, tmp_path, fixtures=only_cursor, inject=cursor_always)
    by_fault = {r["fault"]: r for r in rows}
    assert by_fault["none"]["max_weight_error"] == 0.0 and not by_fault["none"]["ids_changed"]
    cursor = by_fault["cursor"]
    assert cursor["ids_changed"] and cursor["max_weight_error"] > 0
    for fault in ("momentum", "key"):
        same = {k: by_fault[fault][k] for k in ("max_weight_error", "ids_changed", "first_divergence_step")}
        assert same == {k: cursor[k] for k in same}, fault
