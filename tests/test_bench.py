"""The bench's bookkeeping: gates before clocks, every sample kept, ratios from medians, targets as met or not.

Nothing here asserts a timing: only that the recorded numbers are consistent with each other
(arithmetic on the kept samples) and that a wrong loop is refused before it is measured.
"""

import numpy as np
import pytest

import shardlab as sl
from shardlab.errors import VariantMismatchError
from shardlab.perf import endtoend, targets

pytestmark = pytest.mark.stage4


def test_endtoend_keeps_every_sample_and_derives_ratios_from_medians(data, mesh):
    found = endtoend.batch(data, mesh, 7, steps=5, samples=3)
    assert set(found["per_step_ms"]) == set(endtoend.VARIANTS)
    assert all(len(v) == 3 for v in found["per_step_ms"].values())
    assert len(found["order"]) == 3 and all(sorted(r) == sorted(endtoend.VARIANTS) for r in found["order"])
    assert len({r[0] for r in found["order"]}) == 3  # the lead rotates
    medians = {name: float(np.median(v)) for name, v in found["per_step_ms"].items()}
    assert found["median_per_step_ms"] == medians
    best = min(medians["fused_psum"], medians["fused_stats"])
    assert medians[found["best_4dev_fused"]] == best
    assert found["speedup_over_course"]["fused_psum"] == pytest.approx(medians["course_loop"] / medians["fused_psum"])
    assert found["best_fused_over_floor"] == pytest.approx(best / medians["floor_1dev"])
    assert found["max_scaled_loss_error_vs_course"]["course_loop"] == 0


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
    found = {"e2e_speedup_b7": 50.0, "e2e_speedup_b1023": 2.99, "fused_over_floor_b7": 10.5}
    rows = targets.targets(found)
    assert set(rows) == set(targets.TARGETS)
    assert rows["e2e_speedup_b7"]["met"] is True  # >= 50 holds at 50
    assert rows["e2e_speedup_b1023"] == {"target": ">= 3.0", "measured": 2.99, "met": False}
    assert rows["fused_over_floor_b7"]["met"] is False
    assert rows["prepare_over_update_after"] == {"target": "<= 1.0", "measured": None, "met": False}
    retired = targets.retired({"packed_4dev_over_single": 2.6, "k16_speedup": 1.8, "floor_psum_4dev_over_single": 2})
    assert set(retired) == {"packed_4dev_over_single", "k16_speedup"}
    assert retired["packed_4dev_over_single"]["measured"] == 2.6 and "why_retired" in retired["k16_speedup"]
    assert not set(retired) & set(targets.TARGETS)


def test_a_fused_state_is_a_course_state(data, mesh):
    """Same field names, dtypes and shapes as the schema says, so save/restore need nothing new."""
    found = endtoend.programs(data, mesh, 10, steps=3)
    state, _, _ = found["fused_stats"][0](found["fused_stats"][1], 3)
    arrays = sl.schema.to_arrays(state)
    sl.schema.check(arrays, width=8, rows=23, where="fused state")
    assert set(state) == set(sl.FIELDS) and isinstance(state["cursor"], int) and state["step"] == 3
