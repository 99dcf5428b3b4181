"""The bench's bookkeeping: gates before clocks, every sample kept, ratios from medians, targets as met or not.

Nothing here asserts a timing: only that the recorded numbers are consistent with each other
(arithmetic on the kept samples) and that a wrong loop is refused before it is measured.
"""

import numpy as np
import pytest

import shardlab as sl
from rig.bench import baseline, targets
from shardlab.errors import VariantMismatchError
from shardlab.perf import endtoend

pytestmark = pytest.mark.stage4


@pytest.mark.long  # the end-to-end section run whole, every loop compiled: make test-long's
def test_endtoend_keeps_every_sample_and_derives_ratios_from_medians(data, mesh):
    samples = 2 * endtoend.BLOCK + 1  # three rounds of blocks: two of BLOCK samples at least, one of 1 at least
    found = endtoend.batch(data, mesh, 7, steps=5, samples=samples)
    assert set(found["per_step_ms"]) == set(endtoend.VARIANTS) == set(found["blocks"])
    for name, blocks in found["blocks"].items():
        assert len(found["per_step_ms"][name]) == sum(blocks) >= samples and len(blocks) == 3
        assert min(blocks[:2]) >= endtoend.BLOCK and blocks[2] >= 1
    assert len(found["order"]) == 3 and all(sorted(r) == sorted(endtoend.VARIANTS) for r in found["order"])
    assert len({r[0] for r in found["order"]}) == 3  # the lead rotates
    medians = {name: float(np.median(v)) for name, v in found["per_step_ms"].items()}
    assert found["median_per_step_ms"] == medians
    best = min(medians["fused_psum"], medians["fused_stats"])
    assert medians[found["best_4dev_fused"]] == best
    assert found["speedup_over_course"]["fused_psum"] == pytest.approx(medians["course_loop"] / medians["fused_psum"])
    assert found["best_fused_over_floor"] == pytest.approx(best / medians["floor_1dev"])
    assert found["max_scaled_loss_error_vs_course"]["course_loop"] == 0


@pytest.mark.slow  # compiles the fused loops
def test_a_loop_that_picks_other_ids_or_losses_is_not_timed(data, mesh):
    found = endtoend.programs(data, mesh, 7, steps=4)
    run, start = found["fused_psum"]

    def shifted_losses(state, steps):
        state, losses, ids = run(state, steps)
        return state, losses * 1.01, ids

    def other_ids(state, steps):
        state, losses, ids = run(state, steps)
        return state, losses, [ids[1], ids[0], *ids[2:]]

    for broken, message in ((shifted_losses, "losses differ"), (other_ids, "sample IDs differ")):
        with pytest.raises(VariantMismatchError, match=message):
            endtoend.gate({**found, "fused_psum": (broken, start)}, data, 4)


def test_targets_are_met_or_not_by_their_bounds_and_never_hidden():
    found = {"e2e_speedup_b7": 50.0, "fused_over_nocollective_b1023": 1.21, "cost_model_hits": 8 / 9}
    rows = targets.targets(found)
    assert set(rows) == set(targets.TARGETS)
    assert rows["e2e_speedup_b7"]["met"] is True  # >= 50 holds at 50
    assert rows["fused_over_nocollective_b1023"] == {"target": "<= 1.2", "measured": 1.21, "met": False}
    assert rows["cost_model_hits"]["met"] is True  # 8 of 9 is the bound itself
    assert rows["run_over_program_b7"] == {"target": "<= 1.1", "measured": None, "met": False}
    old = {"packed_4dev_over_single": 2.6, "k16_speedup": 1.8, "floor_psum_4dev_over_single": 2}
    retired = targets.retired({**old, "e2e_speedup_b1023": 2.9, "fused_over_floor_b7": 4.0})
    assert set(retired) == set(targets.RETIRED)
    assert retired["packed_4dev_over_single"]["measured"] == 2.6 and "why_retired" in retired["k16_speedup"]
    assert not set(retired) & set(targets.TARGETS)


def test_ratios_divide_the_picks_median_by_each_floor_and_the_best_course_median():
    """`_loops` from a hand-made end-to-end row: the course median is the lower of in-bench and dedicated."""
    medians = {"course_loop": 2.0, "fused_inputs": 0.1, "no_collective": 0.05, "floor_1dev": 0.02}
    row = {"b7": {"median_per_step_ms": {**medians, "program:fused_inputs": 0.08}, "pick_loop": "fused_inputs"}}
    found = targets._loops(row, {"b7": {"best_per_step_ms": 1.5, "median_per_step_ms": 1.9}})
    assert found["e2e_speedup_b7"] == pytest.approx(1.5 / 0.1)
    assert found["course_in_bench_over_dedicated_b7"] == pytest.approx(2.0 / 1.5)
    assert found["fused_over_nocollective_b7"] == pytest.approx(2.0)
    assert found["fused_over_floor_b7"] == pytest.approx(5.0)
    assert found["run_over_program_b7"] == pytest.approx(1.25)
    assert targets._loops(row, {})["e2e_speedup_b7"] == pytest.approx(20.0)  # no dedicated run: the in-bench one


@pytest.mark.slow  # compiles the fused loops
def test_a_fused_state_is_a_course_state(data, mesh):
    """Same field names, dtypes and shapes as the schema says, so save/restore need nothing new."""
    found = endtoend.programs(data, mesh, 10, steps=3)
    state, _, _ = found["fused_stats"][0](found["fused_stats"][1], 3)
    arrays = sl.schema.to_arrays(state)
    sl.schema.check(arrays, width=8, rows=23, where="fused state")
    assert set(state) == set(sl.FIELDS) and isinstance(state["cursor"], int) and state["step"] == 3


def test_the_dedicated_baseline_is_its_best_blocks_median():
    """Blocks of 3, 4 and 1 samples: the figure is the lowest block median, all samples kept."""
    samples = [3.0, 1.0, 2.0, 9.0, 8.0, 7.0, 6.0, 5.0]
    found = baseline.summary(samples, [3, 4, 1])
    assert found["block_medians_ms"] == [2.0, 7.5, 5.0]
    assert found["best_per_step_ms"] == 2.0 and found["median_per_step_ms"] == 5.5
    assert found["per_step_ms"] == samples
