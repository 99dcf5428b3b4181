"""The optimised updates (packed, resident, multistep) replay the NumPy reference and the stage 2 path.

Correctness only: nothing here is timed. The reference IDs come from the course idiom
(each epoch's order cut into batches, never across epochs), the losses and weights from
float64 NumPy (shardlab.verify.oracle).
"""

import functools

import jax
import numpy as np
import pytest
from conftest import course_run, idiom_batches, oracle_path
from jax.sharding import PartitionSpec as P

import shardlab as sl
from rig.bench import multistep, resident
from shardlab.core.state import updated
from shardlab.errors import ConfigError, EmptyBatchError
from shardlab.perf import costmodel, device_sampler, fused, packed, stats
from shardlab.verify import oracle

pytestmark = pytest.mark.stage4

STEPS = 9  # crosses at least one epoch boundary of the 23-row fixture for every batch size below


def resident_transition(state, placed, batch_size, step, mesh):
    """`sl.transition` with the dataset already on the devices: `resident.next_batch`, then the step."""
    state, batch = resident.next_batch(state, placed, batch_size, mesh)
    weights, momentum, loss, _ = step(*batch[:3], state["weights"], state["momentum"])
    return updated(state, weights, momentum), float(loss), batch.ids


def multistep_chunk(state, data, batch_size, k, run, mesh):
    """K transitions in one dispatch: `multistep.prepare_many`, then the scanned step; (state, K losses, K ids)."""
    state, placed, ids = multistep.prepare_many(state, data, batch_size, k, mesh)
    weights, momentum, losses = run(*placed, state["weights"], state["momentum"])
    return updated(state, weights, momentum, k), [float(loss) for loss in np.asarray(losses)], ids


def multistep_transitions(data, mesh, seed, batch_size, steps, run, chunks=(2, 7)):
    """`steps` updates dispatched in uneven chunks (2 + 7 = 9), so the second straddles epochs."""
    assert sum(chunks) == steps
    state, losses, ids = sl.initial(seed, data, mesh), [], []
    for k in chunks:
        state, chunk_losses, chunk_ids = multistep_chunk(state, data, batch_size, k, run, mesh)
        losses += chunk_losses
        ids += chunk_ids
    return state, losses, ids


@pytest.fixture(scope="module")
def runs(data, mesh):
    """Each path as f(seed, batch_size) -> (state, losses, ids); compiled once for the module."""
    placed = resident.place_dataset(data, mesh)
    plain, packed_step = sl.make_step(mesh), packed.make_packed_step(mesh)
    res, res_packed = resident.make_resident_step(mesh), resident.make_resident_step(mesh, packed=True)
    scan = multistep.make_multistep(mesh)
    on_device = functools.partial(course_run, data, mesh, transition=resident_transition, placed=placed)
    return {
        "stage2": functools.cache(lambda seed, b: course_run(data, mesh, seed, b, STEPS, step=plain)),
        "packed": lambda seed, b: course_run(data, mesh, seed, b, STEPS, step=packed_step),
        "resident": lambda seed, b: on_device(seed, b, STEPS, step=res),
        "resident_packed": lambda seed, b: on_device(seed, b, STEPS, step=res_packed),
        "multistep": lambda seed, b: multistep_transitions(data, mesh, seed, b, STEPS, scan),
    }


# each case compiles its variant for another batch shape: the inner loop runs batch 7, make test every size
@pytest.mark.parametrize("batch_size", [pytest.param(b, marks=[pytest.mark.slow] * (b != 7)) for b in (7, 10, 40)])
@pytest.mark.parametrize("variant", ["multistep", "packed", "resident", "resident_packed"])
def test_variant_replays_numpy_and_the_stage2_path(variant, batch_size, data, runs):
    seed = 17 if batch_size != 10 else 29
    ref_ids = idiom_batches(seed, len(data.targets), batch_size, STEPS)
    ref_losses, ref_w, ref_v = oracle_path(data, ref_ids)
    base, base_losses, base_ids = runs["stage2"](seed, batch_size)
    state, losses, ids = runs[variant](seed, batch_size)
    for got, want, plain in zip(ids, ref_ids, base_ids):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, plain)
    np.testing.assert_allclose(losses, ref_losses, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(losses, base_losses, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(state["weights"]), ref_w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(state["momentum"]), ref_v, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(state["weights"]), np.asarray(base["weights"]), rtol=1e-5, atol=1e-6)
    got, plain = sl.host_copy(state), sl.host_copy(base)
    for field in ("key", "order", "cursor", "step"):
        np.testing.assert_array_equal(got[field], plain[field])
    assert got["step"] == STEPS


def test_packed_ir_has_exactly_one_all_reduce(data, mesh):
    args = (*sl.place(*sl.pad(data, np.arange(7), 4), mesh), sl.replicate(np.zeros(8), mesh))
    args = (*args, sl.replicate(np.zeros(8), mesh))
    text = packed.make_packed_step(mesh).lower(*args).as_text()
    assert sl.count_all_reduce(text) == 1
    assert text.count("stablehlo.all_reduce") == 1
    assert sl.count_all_reduce(sl.make_step(mesh).lower(*args).as_text()) == 3


# each case compiles two steps for its mesh and rows: the inner loop runs 4 devices, make test every mesh
@pytest.mark.parametrize("devices", [pytest.param(d, marks=[pytest.mark.slow] * (d != 4)) for d in (1, 2, 4)])
@pytest.mark.parametrize("rows", [1, 5, 23])
def test_packed_step_equals_three_reductions_and_numpy(devices, rows, data):
    mesh = sl.make_mesh(devices)
    rng = np.random.default_rng(rows * 10 + devices)
    ids = rng.permutation(23)[:rows]
    x, y, m = sl.pad(data, ids, devices)
    x[rows:] = np.nan  # padding contents must not matter
    w, v = rng.normal(size=8).astype(np.float32), rng.normal(size=8).astype(np.float32)
    args = (*sl.place(x, y, m, mesh), sl.replicate(w, mesh), sl.replicate(v, mesh))
    got = packed.make_packed_step(mesh)(*args)
    plain = sl.make_step(mesh)(*args)
    expected = oracle.momentum_step(data.features[ids], data.targets[ids], np.ones(rows), w, v)
    for a, b, c in zip(got, plain, expected):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        np.testing.assert_allclose(np.asarray(a), c, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("devices", [1, 2, 4])
def test_resident_step_on_timing_fixture_matches_numpy(devices):
    """Rows spread over every device block (1,023 rows, uneven last block) are gathered where they live."""
    data = sl.timing_fixture()
    mesh = sl.make_mesh(devices)
    placed = resident.place_dataset(data, mesh)
    step = resident.make_resident_step(mesh)
    ids = np.array([0, 255, 256, 511, 512, 767, 768, 1022, 3], np.int32)
    w = np.linspace(-0.5, 0.5, 64).astype(np.float32)
    v = np.full(64, 0.1, np.float32)
    slots = jax.device_put(resident.slot_ids(ids, 12), jax.sharding.NamedSharding(mesh, P()))
    got = step(placed.features, placed.targets, slots, sl.replicate(w, mesh), sl.replicate(v, mesh))
    expected = oracle.momentum_step(data.features[ids], data.targets[ids], np.ones(len(ids)), w, v)
    for a, c in zip(got, expected):
        np.testing.assert_allclose(np.asarray(a), c, rtol=1e-4, atol=1e-4)


def test_resident_moves_only_ids_after_placement(data, mesh):
    placed = resident.place_dataset(data, mesh)
    assert placed.features.sharding.spec == P("data", None) and placed.targets.sharding.spec == P("data")
    assert placed.features.shape == (24, 8) and placed.rows == 23
    state = sl.initial(17, data, mesh)
    new, ids_on_devices, ids = resident.prepare(state, placed, 7, mesh)
    assert ids_on_devices.dtype == np.int32 and ids_on_devices.shape == (7,)
    np.testing.assert_array_equal(np.asarray(ids_on_devices), ids)
    assert new["cursor"] == 7 and state["cursor"] == 0
    with pytest.raises(EmptyBatchError):
        resident.slot_ids(np.array([], np.int32), 4)


def test_sixteen_updates_in_one_dispatch_equal_sixteen_transitions(mesh):
    data = sl.timing_fixture()
    base, base_losses, base_ids = course_run(data, mesh, 17, 7, 16)
    run = multistep.make_multistep(mesh)
    state, losses, ids = multistep_chunk(sl.initial(17, data, mesh), data, 7, 16, run, mesh)
    for a, b in zip(ids, base_ids):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(losses, base_losses, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(state["weights"]), np.asarray(base["weights"]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(state["momentum"]), np.asarray(base["momentum"]), rtol=1e-5, atol=1e-6)
    assert state["step"] == 16 and state["cursor"] == base["cursor"] == 16 * 7
    with pytest.raises(ConfigError):
        multistep.prepare_many(state, data, 7, 0, mesh)


# ---- the cost model's inputs against the programs themselves, and its choice ----

COLLECTIVE_OPS = {"all-reduce": "stablehlo.all_reduce", "all-gather": "stablehlo.all_gather"}


def _collective_shapes(text: str, op: str) -> list[int]:
    """Element counts of the result of every `op` in StableHLO text (the type after `->` closing the op)."""
    lines, counts = text.splitlines(), []
    for start, line in enumerate(lines):
        if f'"{op}"' not in line:
            continue
        closing = next(rest for rest in lines[start:] if ") -> tensor<" in rest)
        dims = closing.rsplit("-> tensor<", 1)[1].split("x")[:-1]
        counts.append(int(np.prod([int(d) for d in dims])))
    return counts


@pytest.mark.parametrize(
    "variant,width,batch_size,k",
    [("stats", 5, 9, 3), ("stats_sym", 6, 3, 4), ("stats_sym", 7, 3, 2), ("inputs", 7, 10, 5)],
)
def test_floats_in_the_model_are_the_floats_in_the_one_collective(variant, width, batch_size, k, mesh):
    """One collective per dispatch whose result holds exactly the model's float count (read from the IR)."""
    data = sl.fixtures.synthetic(19, width, 3)
    loop = fused.FusedLoop(data, mesh, batch_size, k, variant=variant)
    text = loop.program.lower(*loop.arguments(sl.initial(17, data, mesh), k)).as_text()
    shapes = _collective_shapes(text, COLLECTIVE_OPS[costmodel.VARIANTS[variant].collective])
    slots = device_sampler.slot_count(batch_size, 19, mesh.size)
    found = costmodel.inputs_of(variant, slots, width, mesh.size, k)
    assert len(shapes) == found["collectives"] == 1
    half = -(-width // 2)
    expected = {  # written out independently of the table
        "stats": k * (width * width + width + 2),
        "stats_sym": k * (half * (2 * half + 1) + width + 2),
        "inputs": k * slots * (width + 1),
    }[variant]
    assert shapes[0] == found["floats"] == expected


def test_the_per_step_loop_reduces_d_plus_two_floats_k_times(mesh):
    data = sl.fixtures.synthetic(19, 6, 3)
    loop = fused.FusedLoop(data, mesh, 5, 4, variant="per_step")
    text = loop.program.lower(*loop.arguments(sl.initial(17, data, mesh), 4)).as_text()
    assert _collective_shapes(text, COLLECTIVE_OPS["all-reduce"]) == [6 + 2]  # once, inside the step loop
    found = costmodel.inputs_of("per_step", device_sampler.slot_count(5, 19, 4), 6, 4, 4)
    assert found["collectives"] == 4 and found["floats"] == 4 * (6 + 2)


def test_the_choice_is_the_cheapest_exact_prediction_and_is_printed_with_its_inputs():
    rng = np.random.default_rng(3)
    for _ in range(20):
        costs = {key: float(rng.uniform(0.1, 2.0)) * value for key, value in costmodel.DEFAULT_COSTS.items()}
        batch_size, width, k = int(rng.integers(1, 2000)), int(rng.integers(1, 300)), int(rng.integers(1, 200))
        slots = -(-min(batch_size, 1023) // 4) * 4
        choice = costmodel.choose(batch_size, width, 4, k, slots, costs)
        exact = {n: r["predicted_us"] for n, r in choice.table.items() if costmodel.VARIANTS[n].exact}
        assert choice.pick == min(exact, key=exact.get) and choice.pick != "no_collective"
        general = {n: us for n, us in exact.items() if costmodel.VARIANTS[n].general}  # no least-squares shortcut
        assert min(general, key=general.get) in ("per_step", "inputs")  # a network's loss has no statistics shortcut
        text = str(choice)
        assert f"B={batch_size}" in text and f"d={width}" in text and f"K={k}" in text and choice.pick in text
    with pytest.raises(ConfigError, match="unknown fused variant"):
        costmodel.body_of("fastest")


@pytest.mark.parametrize("width", [1, 2, 5, 8, 13])
def test_the_folded_gram_matrix_unfolds_to_itself(width):
    x = np.random.default_rng(width).normal(size=(3, 6, width)).astype(np.float32)
    gram = np.einsum("kri,krj->kij", x, x)
    folded = np.asarray(stats.fold(gram))
    assert folded.shape == (3, -(-width // 2) * (2 * -(-width // 2) + 1))
    if width % 2 == 0:
        assert folded.shape[1] == width * (width + 1) // 2  # exactly the upper triangle
    np.testing.assert_array_equal(np.asarray(stats.unfold(folded, width)), gram)
