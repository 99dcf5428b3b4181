"""Self-check questions of stages 1-3a, 4b, 5a and 5b that ask about situations the notebooks never run: another mesh,
batch size, save point or write order. Each test runs that situation (or computes it with NumPy) and checks that
the letter the course marks right names what happens, and that no other option does."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import shardlab as sl
from shardlab.course import selfcheck
from shardlab.course.ir import label_all_reduces
from shardlab.errors import CheckpointExistsError, CorruptCheckpointError
from shardlab.verify import faults, oracle


def options(notebook: str, number: str) -> tuple[str, list[str]]:
    """(the option marked right, the others) of question `number` of `notebook`."""
    (q,) = [q for q in selfcheck.questions(notebook) if q.number == number]
    right = selfcheck.LETTERS.index(q.answer)
    return q.options[right], [o for i, o in enumerate(q.options) if i != right]


def only_right(notebook: str, number: str, *facts: str) -> None:
    """Every fact is named by the option marked right and by no other option of the question."""
    right, others = options(notebook, number)
    for fact in facts:
        assert fact in right, (notebook, number, fact, right)
        assert not any(fact in o for o in others), (notebook, number, fact, others)


def walk_ids(state, data, batch_size, calls, mesh):
    """The ids of `calls` batches of the course's sampler from `state`, and the state after them."""
    ids = []
    for _ in range(calls):
        state, batch = sl.next_batch(state, data, batch_size, mesh)
        ids.append(np.asarray(batch.ids).tolist())
    return ids, state


def test_seven_rows_on_three_devices(data):
    mesh = sl.make_mesh(3)
    _, batch = sl.next_batch(sl.initial(17, data, mesh), data, 7, mesh)
    shards = sorted(batch.mask.addressable_shards, key=lambda s: s.index[0].start or 0)
    counts = [int(np.asarray(s.data).sum()) for s in shards]
    assert counts == oracle.device_counts(7, 3)
    only_right("stage1_batches", "1", f"{batch.mask.shape[0]} slots, {counts}")


def test_seventeen_rows_in_batches_of_five_draw_the_new_order_at_the_fifth_call():
    mesh, rows = sl.make_mesh(), 17
    seventeen = sl.fixtures.synthetic(rows, 8, seed=5)
    ids, _ = walk_ids(sl.initial(17, seventeen, mesh), seventeen, 5, 5, mesh)
    lengths = [len(i) for i in ids[:4]]
    assert lengths == [5, 5, 5, rows - 15]  # 17 = 3 x 5 + 2, by hand
    first_epoch = oracle.idiom_epochs(17, rows, 2)
    assert sum(ids[:4], []) == first_epoch[0]["order"].tolist()
    assert ids[4] == first_epoch[1]["order"][:5].tolist()  # the 5th call's batch opens the second permutation
    only_right("stage1_batches", "2", f"{', '.join(map(str, lengths))}; the 5th call")


def test_the_gradient_all_reduce_of_32_features_on_two_devices(data):
    mesh = sl.make_mesh(2)
    x = np.random.default_rng(3).normal(size=(6, 32)).astype(np.float32)
    y = x.sum(axis=1)
    args = sl.place(*sl.pad((x, y), np.arange(5), 2), mesh)
    zeros = sl.replicate(np.zeros(32), mesh)
    ir = sl.make_step(mesh).lower(*args, zeros, zeros).as_text()
    rows = label_all_reduces(ir, 32)
    (gradient,) = [r for r in rows if r["sums"].startswith("the gradient numerator")]
    assert len(rows) == 3 and "replica_groups = dense<[[0, 1]]>" in ir
    only_right(
        "stage2_update", "1", f"{gradient['type'].replace('&lt;', '<').replace('&gt;', '>')}, replica_groups [[0, 1]]"
    )


def test_equal_counts_make_the_mean_of_local_means_the_global_mean():
    rng = np.random.default_rng(5)
    x, y, w = rng.normal(size=(8, 8)), rng.normal(size=8), rng.normal(size=8)
    parts = oracle.device_sums(x, y, np.ones(8), w, 4)
    assert parts["counts"].tolist() == [2, 2, 2, 2]
    np.testing.assert_allclose(oracle.local_means(parts).mean(axis=0), oracle.rebuild(parts)[1], rtol=1e-12)
    unequal = oracle.device_sums(x, y, np.array([1, 1, 1, 1, 1, 1, 1, 0.0]), w, 4)  # [2, 2, 2, 1], as the page
    assert np.max(np.abs(oracle.local_means(unequal).mean(axis=0) - oracle.rebuild(unequal)[1])) > 1e-3
    only_right("stage2_update", "2", "yes")


def test_a_psum_of_the_mask_blocks_adds_them_entry_by_entry():
    mesh = sl.make_mesh()
    values = np.array([1, 1, 1, 1, 1, 1, 1, 0], np.float32)  # the first batch's mask: 7 rows in 8 slots
    mask = jax.device_put(values, jax.NamedSharding(mesh, P("data")))
    summed = jax.jit(jax.shard_map(lambda m: jax.lax.psum(m, "data"), mesh=mesh, in_specs=P("data"), out_specs=P()))
    found = summed(mask)
    by_hand = values.reshape(4, 2).sum(axis=0).tolist()  # the four (2,) blocks added entry by entry
    assert np.asarray(found).tolist() == by_hand == [4.0, 3.0] and len(found.addressable_shards) == 4
    only_right("stage2_update", "3", "[4.0, 3.0]")


def test_three_rows_on_eight_devices_leave_five_empty_devices_that_add_zeros():
    rng = np.random.default_rng(7)
    x, y, w = rng.normal(size=(8, 4)), rng.normal(size=8), rng.normal(size=4)
    mask = np.array([1, 1, 1, 0, 0, 0, 0, 0.0])  # 3 rows in 8 slots, filled in order
    parts = oracle.device_sums(x, y, mask, w, 8)
    empty = [d for d in range(8) if parts["counts"][d] == 0]
    assert oracle.device_counts(3, 8).count(0) == len(empty) == 5
    assert not np.any(parts["grad_nums"][empty]) and not np.any(parts["loss_nums"][empty])
    np.testing.assert_allclose(oracle.rebuild(parts)[1], oracle.masked_mean(x[:3], y[:3], np.ones(3), w)[1])
    only_right("stage2_update", "4", "five devices join every psum", "the 3 rows' mean")


def test_a_momentum_reset_at_step_zero_changes_nothing(data):
    mesh = sl.make_mesh()
    step = sl.make_step(mesh)
    start = sl.initial(17, data, mesh)
    careless = {**start, "momentum": sl.replicate(np.zeros(8), mesh)}
    for _ in range(3):
        start, _, _ = sl.transition(start, data, 7, step, mesh)
        careless, _, _ = sl.transition(careless, data, 7, step, mesh)
    np.testing.assert_array_equal(np.asarray(start["weights"]), np.asarray(careless["weights"]))
    only_right("stage3a_checkpoint", "1", "never")


def test_a_key_reset_after_two_batches_of_ten_shows_at_step_four(data):
    mesh = sl.make_mesh()
    _, saved = walk_ids(sl.initial(17, data, mesh), data, 10, 2, mesh)
    assert saved["cursor"] == 20
    right, _ = walk_ids(saved, data, 10, 3, mesh)
    reset = {**saved, "key": np.asarray(jax.random.PRNGKey(17), np.uint32)}
    wrong, _ = walk_ids(reset, data, 10, 3, mesh)
    first = next(step for step, (a, b) in enumerate(zip(right, wrong), start=3) if a != b)
    assert first == 2 + -(-(23 - 20) // 10) + 1
    only_right("stage3a_checkpoint", "2", f"step {first}")


def test_a_save_cut_short_in_place_is_refused_by_restore_and_blocks_the_name(data, tmp_path):
    mesh = sl.make_mesh()
    state, contract = sl.initial(17, data, mesh), sl.contract(data, sl.Config(seed=17, batch_size=7))
    whole = sl.save(tmp_path / "whole.npz", state, contract)
    cut = faults.truncated(whole, tmp_path / "checkpoint.npz")  # the first half, under the final name
    with pytest.raises(CorruptCheckpointError):
        sl.restore(cut, contract, mesh)
    with pytest.raises(CheckpointExistsError):
        sl.save(cut, state, contract)
    only_right("stage3a_checkpoint", "4", "the first half", "refuses it as truncated", "the name exists")


def test_a_batch_of_five_on_four_devices_compiles_at_the_first_and_fifth_steps(data):
    mesh = sl.make_mesh()
    ids, _ = walk_ids(sl.initial(17, data, mesh), data, 5, 10, mesh)
    lengths = [len(i) for i in ids]
    assert lengths[:5] == oracle.epoch_batches(23, 5)  # 5, 5, 5, 5, 3: the epoch's last batch holds 3 rows
    padded = [-(-n // 4) * 4 for n in lengths]  # slots: the rows padded to a multiple of the 4 devices
    compiles = [step for step, shape in enumerate(padded, start=1) if shape not in padded[: step - 1]]
    assert compiles == [1, 5]
    only_right("stage5b_scaling", "3", "steps 1 and 5", "3 rows")


def test_a_reseeded_key_first_shows_where_a_new_permutation_is_drawn(data):
    mesh = sl.make_mesh()
    _, saved = walk_ids(sl.initial(17, data, mesh), data, 7, 2, mesh)  # mid-epoch, as part 1 saves
    right, _ = walk_ids(saved, data, 7, 6, mesh)
    wrong, _ = walk_ids({**saved, "key": np.asarray(jax.random.PRNGKey(99), np.uint32)}, data, 7, 6, mesh)
    first = next(i for i, (a, b) in enumerate(zip(right, wrong)) if a != b)
    # by hand: 23 rows at batch 7 are read as 7, 7, 7, 2; two were read before the save, so the saved order
    # still gives two batches and the third resumed one is the first of a new permutation
    assert oracle.epoch_batches(23, 7) == [7, 7, 7, 2] and saved["cursor"] == 14 and first == 2
    assert right[:2] == wrong[:2]  # the resumed batches before it read only the saved order
    only_right("stage3b_resume", "1", "the first step that draws a new permutation")


def test_p_data_over_two_devices_leaves_half_the_values_on_each():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("data",))
    weights = jax.device_put(np.arange(8, dtype=np.float32), jax.NamedSharding(mesh, P("data")))
    assert [s.data.shape[0] for s in weights.addressable_shards] == [8 // 2] * 2
    only_right("stage3c_orbax_lesson", "1", "4 values")


def test_four_transitions_whose_middle_halves_overlap_name_no_longer_annotation():
    prepare, update = np.array([1.0, 1.2, 4.0, 1.1]), np.array([0.6, 3.0, 1.4, 0.7])  # the question's numbers
    (p_lo, p_hi), (u_lo, u_hi) = np.percentile(prepare, [25, 75]), np.percentile(update, [25, 75])
    assert not (p_lo > u_hi or u_lo > p_hi)  # the halves overlap
    assert np.median(prepare) > np.median(update)  # though the medians alone would name the preparation
    only_right("stage4a_profile", "2", "the middle halves overlap")
    only_right("stage4a_profile", "3", f"{1.0:.1f} − {0.7:.1f} = {1.0 - 0.7:.1f} ms")


def test_the_same_rows_per_device_in_twice_the_time_is_half_efficiency():
    rows, t1, t2 = 1000.0, 4.0, 8.0  # the question's times; any rows per device
    one, two = rows / t1, 2 * rows / t2  # rows per ms: each of two devices holds the same rows
    assert two / (2 * one) == 0.5 and two == one  # by hand: the same rows per second as one device
    only_right("stage5b_scaling", "1", "0.5")


def test_a_kill_after_step_4_with_step_3_published_runs_step_4_again():
    saves, published, completed = (3, 6, 9), {3}, 4  # the question's group: killed inside step 5
    resumed = max(s for s in saves if s in published and s <= completed)
    again = list(range(resumed + 1, completed + 1))  # every step completed after the newest manifest
    assert (resumed, again) == (3, [4])
    only_right("stage5a_protocol", "1", "one, step 4")


def test_eight_usable_cores_bound_four_devices_at_one():
    cores, devices = 8, 4
    assert min(cores, devices) / devices == 1.0  # by hand: every device could have a core of its own
    only_right("stage5b_scaling", "2", "4/4 = 1")


def test_twenty_steps_per_dispatch_run_twenty_and_one_all_reduces(data):
    from shardlab.course import ir
    from shardlab.perf import fused, stats, steps

    mesh, k = sl.make_mesh(), 20
    start, runs = sl.initial(17, data, mesh), {}
    for name, body in (("fused_psum", steps.per_step_body), ("fused_stats", stats.body)):
        loop = fused.FusedLoop(data, mesh, 7, k, body=body)
        places = ir.all_reduce_places(loop.program.lower(*loop.arguments(start, k)).as_text())
        runs[name] = k * places["inside a loop"] + places["outside every loop"]  # a loop's body runs K times
    assert runs == {"fused_psum": 20, "fused_stats": 1}
    only_right("stage4b_beyond", "1", "20 and 1")


def test_one_id_on_four_devices_is_gathered_by_device_zero_alone():
    from shardlab.core.sampler import advance, initial_sampler
    from shardlab.perf import device_sampler, steps

    mesh = sl.make_mesh()
    host, drawn = initial_sampler(17, 7), []
    for _ in range(3):
        host, ids = advance(host, 3)
        drawn.append(np.asarray(ids).tolist())
    assert [len(i) for i in drawn] == [3, 3, 1]  # by hand: 7 rows in threes, the epoch's last batch one row
    start = device_sampler.to_device(initial_sampler(17, 7), jax.device_put)
    slots = device_sampler.slot_count(3, 7, mesh.size)
    plan = jax.jit(device_sampler.plan, static_argnames=("batch_size", "slots", "k"))
    _, planned = plan(start, batch_size=3, slots=slots, k=3, active=3)
    blocks = jax.jit(jax.shard_map(lambda i: steps.my_block(i, slots), mesh=mesh, in_specs=P(), out_specs=P("data")))
    mine = np.asarray(blocks(planned.ids[2])).reshape(mesh.size, -1)  # row d: step 3's ids device d gathers
    holding = [d for d, row in enumerate(mine) if (row != device_sampler.EMPTY).any()]
    assert holding == [0] and mine[0].tolist()[0] == drawn[2][0]
    # devices 1 to 3 hold only padding: their gathers read a row, but a mask of 0 keeps it out of the loss
    assert all((row == device_sampler.EMPTY).all() for row in mine[1:])
    only_right("stage4b_beyond", "2", "device 0's only", "mask it")


def _ridge(x, y, w, lam):
    residual = x @ w - y
    return (residual @ residual) / len(y) + lam * w @ w, 2 * x.T @ residual / len(y) + 2 * lam * w


def test_a_ridge_penalty_keeps_the_statistics_sufficient_and_a_logistic_loss_does_not():
    rng = np.random.default_rng(13)
    x, y, lam = rng.normal(size=(12, 3)), rng.normal(size=12), 0.1
    n, xtx, xty, yy = len(y), x.T @ x, x.T @ y, y @ y  # the statistics fused_stats reduces, computed once
    for w in rng.normal(size=(3, 3)):  # any w: loss and gradient from the statistics alone
        loss, grad = _ridge(x, y, w, lam)
        assert np.isclose(loss, (w @ xtx @ w - 2 * w @ xty + yy) / n + lam * w @ w)
        np.testing.assert_allclose(grad, 2 * (xtx @ w - xty) / n + 2 * lam * w)
    # a second data set with the same statistics (rows mixed by an orthogonal matrix) gives another logistic gradient
    q, _ = np.linalg.qr(rng.normal(size=(12, 12)))
    x2, y2 = q @ x, q @ y
    for mine, theirs in ((x2.T @ x2, xtx), (x2.T @ y2, xty), (y2 @ y2, yy)):
        np.testing.assert_allclose(mine, theirs, atol=1e-9)
    np.testing.assert_allclose(_ridge(x2, y2, w, lam)[1], _ridge(x, y, w, lam)[1], atol=1e-9)

    def logistic_grad(a, b, w):
        return a.T @ (1 / (1 + np.exp(-(a @ w))) - b) / len(b)

    assert not np.allclose(logistic_grad(x, y, w), logistic_grad(x2, y2, w))  # the statistics do not determine it
    only_right("stage4b_beyond", "3", "L2 penalty")


def test_of_three_living_controllers_the_one_with_a_later_digest_is_named_as_skipping(monkeypatch):
    import threading

    from test_multi import FakeClient, pulsing

    from shardlab.errors import HangError, LostProcessError
    from shardlab.multi import wait_guard

    monkeypatch.setattr(wait_guard, "PULSE_WINDOW", 1.0)  # the fake peers pulse every 0.1 s
    client, stop = FakeClient(), threading.Event()
    watch = wait_guard.WaitGuard(client, 0, 3, timeout=0.3, report=lambda *_: None)
    try:
        for peer in (1, 2):
            threading.Thread(target=pulsing, args=(client, peer, "step 5", stop), daemon=True).start()
        client.key_value_set("shardlab/agree/4/1", "same")  # process 1 reported step 4
        client.key_value_set("shardlab/agree/5/2", "same")  # process 2 did not, but reported step 5
        with pytest.raises(HangError, match=r"process\(es\) \[2\] skipped step 4") as info:
            watch.agree(4, "same")
        assert not isinstance(info.value, LostProcessError)
    finally:
        stop.set()
        watch.close()
    only_right("stage5a_protocol", "2", "process 2, as skipping step 4")
