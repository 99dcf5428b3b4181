"""Stage 1: the sampler and batches, checked against coverage arithmetic and NumPy."""

import jax
import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import shardlab as sl
from shardlab.errors import ConfigError, DataError, EmptyBatchError

pytestmark = pytest.mark.stage1


def run_ids(seed, n, batch_size, batches):
    state = sl.initial_sampler(seed, n)
    out = []
    for _ in range(batches):
        state, ids = sl.advance(state, batch_size)
        out.append(ids)
    return state, out


def jax_idiom_orders(seed, n, epochs):
    """The course's idiom written out independently: split, keep the first half, draw with the second."""
    key = jax.random.PRNGKey(seed)
    orders = []
    for _ in range(epochs):
        key, subkey = jax.random.split(key)
        orders.append(np.asarray(jax.random.permutation(subkey, n)))
    return orders


def test_23_rows_in_sevens_keep_the_remainder():
    _, batches = run_ids(17, 23, 7, 4)
    assert [len(b) for b in batches] == [7, 7, 7, 2]
    assert sorted(np.concatenate(batches).tolist()) == list(range(23))


def test_ids_follow_the_split_then_permute_idiom():
    orders = jax_idiom_orders(17, 23, 3)
    _, batches = run_ids(17, 23, 7, 12)
    np.testing.assert_array_equal(np.concatenate(batches), np.concatenate(orders))


@settings(max_examples=examples(40), deadline=None)
@given(n=st.integers(1, 40), batch_size=st.integers(1, 50), seed=st.integers(0, 2**31), epochs=st.integers(1, 3))
def test_every_epoch_covers_every_id_once(n, batch_size, seed, epochs):
    lengths = [batch_size] * (n // batch_size) + ([n % batch_size] if n % batch_size else [])
    if batch_size >= n:
        lengths = [n]
    _, batches = run_ids(seed, n, batch_size, len(lengths) * epochs)
    assert [len(b) for b in batches] == lengths * epochs
    per_epoch = len(lengths)
    for e in range(epochs):
        ids = np.concatenate(batches[e * per_epoch : (e + 1) * per_epoch])
        assert sorted(ids.tolist()) == list(range(n))


def test_advance_does_not_touch_its_input():
    state = sl.initial_sampler(29, 23)
    for _ in range(5):
        snapshot = {k: np.copy(v) for k, v in state.items()}
        new, _ = sl.advance(state, 10)
        for k in snapshot:
            np.testing.assert_array_equal(state[k], snapshot[k])
        assert new is not state
        state = new


def test_key_changes_at_the_epoch_boundary_only():
    state = sl.initial_sampler(17, 23)
    keys = [state["key"]]
    for _ in range(8):
        state, _ = sl.advance(state, 7)
        keys.append(state["key"])
    changed = [not np.array_equal(a, b) for a, b in zip(keys, keys[1:])]
    # batches 1-4 are epoch 0, the 5th batch draws epoch 1
    assert changed == [False, False, False, False, True, False, False, False]


def test_same_seed_replays_other_seed_differs():
    _, a = run_ids(17, 23, 7, 8)
    _, b = run_ids(17, 23, 7, 8)
    _, c = run_ids(29, 23, 7, 8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_batch_larger_than_dataset_yields_a_reshuffled_whole_dataset():
    _, batches = run_ids(17, 23, 100, 3)
    for b in batches:
        assert sorted(b.tolist()) == list(range(23))
    assert not np.array_equal(batches[0], batches[1])


@pytest.mark.parametrize(
    "rows,devices,expected",
    [(7, 4, [2, 2, 2, 1]), (1, 4, [1, 0, 0, 0]), (6, 4, [2, 2, 2, 0]), (5, 2, [3, 2]), (3, 1, [3])],
)
def test_padding_counts(rows, devices, expected, data):
    _, _, mask = sl.pad(data, np.arange(rows), devices)
    assert len(mask) % devices == 0 and len(mask) - rows < devices
    assert sl.device_counts(mask, devices) == expected


@settings(max_examples=examples(40), deadline=None)
@given(rows=st.integers(1, 23), devices=st.sampled_from([1, 2, 4]))
def test_padding_is_never_an_observation(rows, devices, data):
    ids = np.arange(rows)[::-1]
    features, targets, mask = sl.pad(data, ids, devices)
    slots = -(-rows // devices) * devices
    assert features.shape == (slots, data.features.shape[1])
    np.testing.assert_array_equal(mask, [1] * rows + [0] * (slots - rows))
    np.testing.assert_array_equal(features[:rows], data.features[ids])
    np.testing.assert_array_equal(targets[:rows], data.targets[ids])
    counts = sl.device_counts(mask, devices)
    assert sum(counts) == rows
    per = slots // devices
    assert counts == [min(per, max(0, rows - d * per)) for d in range(devices)]


def test_placed_batch_has_the_course_shardings(data, mesh):
    state = sl.initial(17, data, mesh)
    new, batch = sl.next_batch(state, data, 7, mesh)
    assert batch.features.sharding.spec == jax.sharding.PartitionSpec("data", None)
    assert batch.targets.sharding.spec == jax.sharding.PartitionSpec("data")
    assert batch.mask.sharding.spec == jax.sharding.PartitionSpec("data")
    assert [int(s.data.sum()) for s in batch.mask.addressable_shards] == [2, 2, 2, 1]
    assert new["step"] == state["step"] == 0 and new["cursor"] == 7 and state["cursor"] == 0


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "7"])
def test_bad_batch_size_is_refused(bad):
    with pytest.raises(ConfigError, match="batch_size"):
        sl.advance(sl.initial_sampler(1, 5), bad)


def test_bad_data_is_refused_before_jax_work():
    x = np.ones((4, 2), np.float32)
    with pytest.raises(DataError, match="rows"):
        sl.check_dataset((x, np.ones(3)))
    with pytest.raises(DataError, match="non-finite"):
        sl.check_dataset((np.where(x > 0, np.nan, x), np.ones(4)))
    with pytest.raises(DataError, match="empty"):
        sl.check_dataset((np.ones((0, 2)), np.ones(0)))
    with pytest.raises(EmptyBatchError):
        sl.pad(sl.Dataset(x, np.ones(4, np.float32)), np.arange(0), 4)


def test_epoch_batches_arithmetic():
    assert sl.epoch_batches(23, 7) == [7, 7, 7, 2]
    assert sl.epoch_batches(31, 6) == [6, 6, 6, 6, 6, 1]
    assert sl.epoch_batches(20, 10) == [10, 10]


def test_both_forms_of_an_epochs_end_meet_in_the_drawn_at_once_form():
    """cursor = rows (drawn by the next call) and cursor 0 with the next epoch drawn are one point of one run."""
    from shardlab.verify.replay import drawn_at_once

    key = np.asarray(jax.random.split(jax.random.PRNGKey(5))[0], np.uint32)
    following, subkey = jax.random.split(key)  # the course idiom, computed here
    lazy = {"key": key, "order": np.arange(6, dtype=np.int32), "cursor": 6}
    eager = {"key": np.asarray(following), "order": np.asarray(jax.random.permutation(subkey, 6)), "cursor": 0}
    a, b = drawn_at_once(lazy), drawn_at_once(eager)
    assert all(np.array_equal(a[name], b[name]) for name in ("key", "order", "cursor"))
    assert lazy["cursor"] == 6 and np.array_equal(lazy["key"], key)  # the caller's dict is untouched
    middle = {**lazy, "cursor": 3}  # mid-epoch: nothing to draw, the fields as they are
    assert drawn_at_once(middle)["cursor"] == 3 and np.array_equal(drawn_at_once(middle)["key"], key)
