"""Stage 3 notebooks: the checkpoint saved in one kernel is continued exactly by a fresh one."""

import json

import numpy as np
import pytest
from conftest import executed, idiom_batches, oracle_path, results

import shardlab as sl
from shardlab.verify import replay

pytestmark = [pytest.mark.stage3, pytest.mark.notebooks]

REQUIRED_REJECTIONS = {
    "missing momentum": "CorruptCheckpointError",
    "duplicate id in order": "CorruptCheckpointError",
    "out-of-range id in order": "CorruptCheckpointError",
    "object array": "CorruptCheckpointError",
    "non-finite weights": "CorruptCheckpointError",
    "big-endian weights": "CorruptCheckpointError",
    "weights of another width": "CorruptCheckpointError",
    "cursor out of range": "CorruptCheckpointError",
    "negative step": "CorruptCheckpointError",
    "key dtype": "CorruptCheckpointError",
    "key shape": "CorruptCheckpointError",
    "contract not JSON": "CorruptCheckpointError",
    "truncated file": "CorruptCheckpointError",
    "not an NPZ file": "CorruptCheckpointError",
    "different data (one value changed)": "ContractMismatchError",
    "different configuration (batch size)": "ContractMismatchError",
    "existing checkpoint path": "CheckpointExistsError",
}


def test_notebooks_ran_clean_with_tagged_cells(run_dir):
    for name, tags in (
        ("stage3a_checkpoint", {"parameters", "setup", "save", "control", "rejections", "faults", "fault-checks"}),
        ("stage3b_resume", {"parameters", "setup", "fresh-kernel", "restore", "recovery", "recovery-checks", "orbax"}),
    ):
        nb = executed(run_dir, name)
        found = {t for cell in nb.cells for t in cell.metadata.get("tags", [])}
        assert tags <= found, (name, tags - found)
        assert not [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]


def test_fresh_kernel_recovers_every_field_exactly(run_dir):
    saved = results(run_dir, "stage3a_checkpoint")["checkpoint"]
    found = results(run_dir, "stage3b_resume")
    assert found["process"]["saved_by"] != found["process"]["resumed_by"]
    recovery = found["recovery"]
    for field in ("weights", "momentum", "key", "order", "cursor", "step", "losses"):
        assert recovery[field] == 0.0, field
    assert recovery["ids_mismatched"] == 0
    per_epoch = -(-23 // 7)
    assert saved["save_step"] == per_epoch + 1 and saved["cursor"] == 7  # past the first epoch boundary
    assert recovery["steps_compared"] == saved["continue_steps"] == 3 * per_epoch
    assert recovery["epochs_covered"] == pytest.approx(3.0)  # from mid-epoch: 69 ids, three whole epochs
    assert found["divergence"] is None
    for name, entry in found["orbax"].items():
        assert entry["max_abs_diff"] == 0.0 and entry["same_shape_dtype"], name
    assert found["orbax"]["weights"]["replicated_on_mesh"] and found["orbax"]["momentum"]["replicated_on_mesh"]


def test_a_third_process_continues_the_saved_checkpoint_too(run_dir, data, mesh):
    saved = results(run_dir, "stage3a_checkpoint")["checkpoint"]
    contract = sl.contract(data, sl.Config(seed=17, batch_size=7))
    state = sl.restore(run_dir / saved["file"], contract, mesh)
    control = replay.load_record(run_dir / saved["control"])
    steps = len(control["ids"])
    step = sl.make_step(mesh)
    for k in range(steps):
        state, loss, ids = sl.transition(state, data, 7, step, mesh)
        np.testing.assert_array_equal(ids, control["ids"][k])
        assert loss == control["losses"][k]
        assert state["cursor"] == control["cursor"][k] and state["step"] == control["step"][k]
    np.testing.assert_array_equal(np.asarray(state["weights"]), control["weights"][-1])
    np.testing.assert_array_equal(np.asarray(state["key"]), control["key"][-1])


def test_every_rejection_is_demonstrated(run_dir):
    rows = results(run_dir, "stage3a_checkpoint")["rejections"]
    shown = {r["case"]: r["error"] for r in rows}
    assert shown == REQUIRED_REJECTIONS
    by_case = {r["case"]: r["message"] for r in rows}
    assert "new experiment" in by_case["different configuration (batch size)"]
    assert "batch_size" in by_case["different configuration (batch size)"]
    assert "data_sha256" in by_case["different data (one value changed)"]
    assert "never overwritten" in by_case["existing checkpoint path"]
    assert "big-endian" in by_case["big-endian weights"] and "momentum" in by_case["missing momentum"]


def test_fault_rows_show_each_fault_where_arithmetic_says(run_dir):
    found = results(run_dir, "stage3a_checkpoint")
    rows = found["faults"]
    assert len(rows) == 8
    for r in rows:
        seed, batch_size = {"seed17_batch7": (17, 7), "seed29_batch10": (29, 10)}[r["fixture"]]
        assert (r["seed"], r["batch_size"]) == (seed, batch_size)
        save_step = -(-23 // batch_size) + 1
        cursor = batch_size
        next_epoch = save_step + -(-(23 - cursor) // batch_size) + 1
        if r["fault"] == "none":
            assert r["max_weight_error"] == 0.0 and r["first_divergence_step"] is None and not r["ids_changed"]
        else:
            assert r["max_weight_error"] > 0
            assert r["ids_changed"] == (r["fault"] != "momentum")
            expected = next_epoch if r["fault"] == "key" else save_step + 1
            assert r["first_divergence_step"] == expected, r
    for setup in found["fault_setup"].values():
        assert setup["key_fault_first_step_matches"]


def test_the_second_fixture_resumes_in_a_fresh_kernel_with_zero_difference(run_dir, data, mesh):
    """Seed 29 / batch 10 ran its own checkpoint/resume pair; every recorded difference is zero, and the
    control it was compared with equals a run computed here without any checkpoint (ids from the course's
    split-then-permute idiom, updates from the NumPy formula)."""
    audit = json.loads((run_dir / "audit.json").read_text())
    fresh = audit["fresh_kernel_recovery"]
    assert set(fresh) == {"seed17_batch7", "seed29_batch10"} and fresh["seed17_batch7"]["folder"] == "."
    entry = fresh["seed29_batch10"]
    folder = run_dir / entry["folder"]
    assert (entry["seed"], entry["batch_size"], entry["folder"]) == (29, 10, "fixtures/seed29_batch10")
    found = results(folder, "stage3b_resume")
    assert found["recovery"] == entry["recovery"] and found["process"]["resumed_by"] == entry["resumed_by"]
    kernels = {str(v[k]) for v in fresh.values() for k in ("saved_by", "resumed_by")}
    assert len(kernels) == 4, "each fixture was saved and resumed by two kernels of its own"
    assert executed(folder, "stage3a_checkpoint").metadata["papermill"]["parameters"]["batch_size"] == 10
    recovery = entry["recovery"]
    for field in ("weights", "momentum", "key", "order", "cursor", "step", "losses", "ids_mismatched"):
        assert recovery[field] == 0, field
    assert entry["divergence"] is None and recovery["epochs_covered"] > 2
    saved = results(folder, "stage3a_checkpoint")["checkpoint"]
    assert recovery["steps_compared"] == saved["continue_steps"] == 3 * -(-23 // 10)

    control = replay.load_record(folder / saved["control"])
    steps = saved["save_step"] + saved["continue_steps"]
    batches = idiom_batches(29, 23, 10, steps)
    for k in range(saved["save_step"], steps):
        losses, w, _ = oracle_path(data, batches[: k + 1])
        j = k - saved["save_step"]
        np.testing.assert_array_equal(control["ids"][j], batches[k])
        np.testing.assert_allclose(control["losses"][j], losses[-1], rtol=1e-5)
        np.testing.assert_allclose(control["weights"][j], w, rtol=1e-5, atol=1e-6)
