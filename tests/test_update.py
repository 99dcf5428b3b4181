"""Stage 2: the sharded update against an independent NumPy computation."""

import functools

import numpy as np
import pytest
from budget import examples
from conftest import course_run
from hypothesis import given, settings
from hypothesis import strategies as st

import shardlab as sl

pytestmark = pytest.mark.stage2


def numpy_step(x, y, w, v, lr=0.03, decay=0.8):
    """Full-batch masked mean gradient with momentum, from the stage 2 notebook's formulas (stage2_update.md)."""
    x, y, w, v = (np.asarray(a, np.float64) for a in (x, y, w, v))
    r = x @ w - y
    loss = np.mean(r**2)
    grad = 2 * x.T @ r / len(y)
    v = decay * v + grad
    return w - lr * v, v, loss, grad


@pytest.mark.parametrize("batch_size", [7, 10, 1, 23, 40])
def test_consecutive_updates_match_numpy(data, mesh, batch_size):
    state, losses, ids = course_run(data, mesh, 17, batch_size, 9)
    w = v = np.zeros(data.features.shape[1])
    for batch_ids, loss in zip(ids, losses):
        w, v, ref_loss, _ = numpy_step(data.features[batch_ids], data.targets[batch_ids], w, v)
        np.testing.assert_allclose(loss, ref_loss, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(state["weights"]), w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(state["momentum"]), v, rtol=1e-4, atol=1e-5)
    assert state["step"] == 9


def test_every_replica_holds_the_same_weights(data, mesh):
    state, _, _ = course_run(data, mesh, 29, 10, 5)
    shards = [np.asarray(s.data) for s in state["weights"].addressable_shards]
    assert len(shards) == 4
    for shard in shards[1:]:
        np.testing.assert_array_equal(shard, shards[0])


@functools.cache
def mesh_and_step(devices: int):
    """One mesh and one jitted step per device count: the examples drawn below reuse its compiled shapes."""
    mesh = sl.make_mesh(devices)
    return mesh, sl.make_step(mesh)


@settings(max_examples=examples(25), deadline=None)
@given(rows=st.integers(1, 23), devices=st.sampled_from([1, 2, 4]), seed=st.integers(0, 1000))
def test_gradient_is_the_global_masked_mean(rows, devices, seed, data):
    mesh, step = mesh_and_step(devices)
    rng = np.random.default_rng(seed)
    ids = rng.permutation(23)[:rows]
    w = rng.normal(size=8).astype(np.float32)
    v = rng.normal(size=8).astype(np.float32)
    x, y, m = sl.pad(data, ids, devices)
    x[rows:] = np.nan  # padding contents must not matter
    placed = sl.place(x, y, m, mesh)
    w1, v1, loss, grad = step(*placed, sl.replicate(w, mesh), sl.replicate(v, mesh))
    rw, rv, rloss, rgrad = numpy_step(data.features[ids], data.targets[ids], w, v)
    np.testing.assert_allclose(np.asarray(grad), rgrad, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(float(loss), rloss, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(w1), rw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(v1), rv, rtol=1e-4, atol=1e-4)


def test_averaging_local_means_would_differ(data, mesh):
    """The 7-row batch splits [2, 2, 2, 1]: a mean of local means weights the lone row twice."""
    ids = np.arange(7)
    x, y = data.features[ids].astype(np.float64), data.targets[ids].astype(np.float64)
    w = np.ones(8)
    parts = [slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 7)]
    local_means = np.mean([2 * x[p].T @ (x[p] @ w - y[p]) / len(y[p]) for p in parts], axis=0)
    step = sl.make_step(mesh)
    _, _, _, grad = step(*sl.place(*sl.pad(data, ids, 4), mesh), sl.replicate(w, mesh), sl.replicate(np.zeros(8), mesh))
    np.testing.assert_allclose(np.asarray(grad), numpy_step(x, y, w, np.zeros(8))[3], rtol=1e-4)
    assert np.max(np.abs(np.asarray(grad) - local_means)) > 1e-2


def test_compiled_step_has_three_all_reduces(data, mesh):
    step = sl.make_step(mesh)
    args = sl.place(*sl.pad(data, np.arange(7), 4), mesh)
    text = step.lower(*args, sl.replicate(np.zeros(8), mesh), sl.replicate(np.zeros(8), mesh)).as_text()
    assert text.count("stablehlo.all_reduce") == 3
    assert sl.count_all_reduce(text) == 3


def test_eager_and_compiled_agree(data, mesh):
    args = sl.place(*sl.pad(data, np.arange(10), 4), mesh)
    w = sl.replicate(np.linspace(-1, 1, 8), mesh)
    v = sl.replicate(np.zeros(8), mesh)
    eager = sl.make_step(mesh, compiled=False)(*args, w, v)
    compiled = sl.make_step(mesh)(*args, w, v)
    for a, b in zip(eager, compiled):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def test_single_device_global_step_matches_numpy(data):
    ids = np.arange(23)
    x, y, m = sl.pad(data, ids, 1)
    w, v = np.full(8, 0.5, np.float32), np.zeros(8, np.float32)
    out = sl.make_single_device_step()(x, y, m, w, v)
    ref = numpy_step(x, y, w, v)
    for a, b in zip(out, ref):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-4, atol=1e-5)


def test_transition_does_not_mutate_its_input(data, mesh):
    state = sl.initial(17, data, mesh)
    before = sl.host_copy(state)
    step = sl.make_step(mesh)
    new, _, _ = sl.transition(state, data, 7, step, mesh)
    after = sl.host_copy(state)
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])
    assert new["step"] == 1 and new["cursor"] == 7


def test_the_compiled_all_reduces_are_read_one_line_each_without_metadata(data, mesh):
    from shardlab.course.ir import compiled_all_reduces

    args = sl.place(*sl.pad(data, np.arange(7), 4), mesh)
    lowered = sl.make_step(mesh).lower(*args, sl.replicate(np.zeros(8), mesh), sl.replicate(np.zeros(8), mesh))
    hlo = lowered.compile().as_text()
    found = compiled_all_reduces(hlo)
    ops = [line for line in hlo.splitlines() if " all-reduce(" in line or " all-reduce-start(" in line]
    assert len(found) == len(ops) >= 1
    assert all("metadata=" not in line and "to_apply=" not in line and "replica_groups=" in line for line in found)
    assert compiled_all_reduces("ROOT %add = f32[] add(%a, %b)") == []


def test_an_all_reduce_is_placed_in_a_loop_when_its_scan_body_or_an_outlined_call_holds_it(mesh):
    import jax
    from jax.sharding import PartitionSpec as P

    from shardlab.course.ir import all_reduce_places
    from shardlab.errors import ConfigError

    @jax.jit  # outlined by JAX as a private function, called from the loop's body
    def summed(x):
        return jax.lax.psum(x, "data")

    def body(x):
        once = jax.lax.psum(x.sum(), "data")  # outside every loop: once per call
        per_step, _ = jax.lax.scan(lambda c, _: (summed(c) + jax.lax.psum(c, "data"), None), once, None, length=5)
        return once + per_step

    program = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P()))
    text = program.lower(np.arange(8.0, dtype=np.float32)).as_text()
    # by hand: three psums written, two of them inside the scan, one of those behind a call
    assert all_reduce_places(text) == {"inside a loop": 2, "outside every loop": 1}, text
    assert text.count("stablehlo.all_reduce") == 3
    with pytest.raises(ConfigError, match="func.func"):
        all_reduce_places("%1 = stablehlo.all_reduce(%0)")


def test_an_all_reduce_is_counted_where_it_is_applied_not_where_its_name_is_mentioned():
    from shardlab.course.ir import all_reduce_places, first_all_reduce

    text = "\n".join(
        [
            "func.func public @main(%arg0: tensor<f32>) -> tensor<f32> {",
            "  // stablehlo.all_reduce adds the partial sums over data",
            '  %0 = "stablehlo.all_reduce"(%arg0) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({',
            "  ^bb0(%a: tensor<f32>, %b: tensor<f32>):",
            "    %1 = stablehlo.add %a, %b : tensor<f32>",
            "    stablehlo.return %1 : tensor<f32>",
            "  }) : (tensor<f32>) -> tensor<f32>",
            "  return %0 : tensor<f32>",
            "}",
        ]
    )
    # by hand: one op applied, on the line that defines %0; the comment only names it
    assert sl.count_all_reduce(text) == 1
    assert [line.split(" = ")[0] for line in sl.update.all_reduce_lines(text)] == ["%0"]
    assert all_reduce_places(text) == {"inside a loop": 0, "outside every loop": 1}
    assert first_all_reduce(text)[1] == '%0 = "stablehlo.all_reduce"(%arg0) : (tensor<f32>) -> tensor<f32>'
