"""Stage 1 and 2 notebooks: what they recorded, checked against arithmetic and an independent NumPy formula."""

import ast
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
from conftest import executed, oracle_path, results

from shardlab.course import catalog
from shardlab.course import execute as runner
from shardlab.verify import oracle

STAGE1 = "stage1_batches"
STAGE2 = "stage2_update"
ROWS = 23  # the teaching fixture


def lengths(rows, batch_size):
    """One epoch's batch lengths, by arithmetic: full batches, then the remainder."""
    return [batch_size] * (rows // batch_size) + ([rows % batch_size] if rows % batch_size else [])


def idiom_ids(seed, rows, epochs):
    """Every id of `epochs` epochs in the course's split-then-permute order."""
    return np.concatenate([e["order"] for e in oracle.idiom_epochs(seed, rows, epochs)]).tolist()


def check_walk(batches, seed, batch_size, rows=ROWS):
    sizes = [b["size"] for b in batches]
    per_epoch = len(lengths(rows, batch_size))
    epochs = len(batches) // per_epoch
    assert sizes == lengths(rows, batch_size) * epochs
    assert [len(b["ids"]) for b in batches] == sizes
    assert [b["device_counts"] for b in batches] == [oracle.device_counts(s, 4) for s in sizes]
    ids = [i for b in batches for i in b["ids"]]
    assert ids == idiom_ids(seed, rows, epochs)
    for e in range(epochs):
        assert sorted(ids[e * rows : (e + 1) * rows]) == list(range(rows)), f"epoch {e} coverage"


@pytest.mark.notebooks
@pytest.mark.stage1
def test_stage1_walk_matches_arithmetic(run_dir):
    res = results(run_dir, STAGE1)
    batches = res["batches"]
    assert [b["size"] for b in batches[:4]] == [7, 7, 7, 2]
    assert [b["device_counts"] for b in batches[:4]] == [[2, 2, 2, 1]] * 3 + [[1, 1, 0, 0]]
    check_walk(batches, 17, 7)
    assert res["coverage"] == {"epochs": len(batches) // 4, "every_id_once": [True] * (len(batches) // 4)}
    assert res["devices"] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]


@pytest.mark.notebooks
@pytest.mark.stage1
def test_stage1_padding_settings_and_transfer(run_dir):
    res = results(run_dir, STAGE1)
    assert res["device_counts_7_rows"] == [2, 2, 2, 1] == oracle.device_counts(7, 4)
    assert res["device_counts_1_row"] == [1, 0, 0, 0] == oracle.device_counts(1, 4)
    assert res["transfer"]["lengths"] == [6, 6, 6, 6, 6, 1] == lengths(31, 6)
    assert res["transfer"]["device_counts"] == [oracle.device_counts(6, 4)] * 5 + [oracle.device_counts(1, 4)]
    settings = {(s["seed"], s["batch_size"]): s for s in res["other_settings"]}
    assert set(settings) == {(29, 7), (17, 10), (17, 40)}
    assert [b["size"] for b in settings[(17, 10)]["batches"]] == [10, 10, 3] * 2
    assert [b["size"] for b in settings[(17, 40)]["batches"]] == [23, 23]
    for (seed, batch_size), s in settings.items():
        check_walk(s["batches"], seed, min(batch_size, ROWS))
        assert s["every_id_once"] == [True, True]


@pytest.mark.notebooks
@pytest.mark.stage2
def test_stage2_errors_are_small(run_dir):
    res = results(run_dir, STAGE2)
    assert res["gradient_error"] < 1e-5
    assert res["loss_error"] < 1e-5
    assert res["local_means"]["device_counts"] == [2, 2, 2, 1]
    assert res["singleton"]["device_counts"] == [1, 0, 0, 0] and res["singleton"]["empty_devices"] == [1, 2, 3]
    assert res["singleton"]["gradient_error"] < 1e-5
    assert res["replicas"] == {"weights": 4, "momentum": 4, "all_equal": True}
    assert res["devices"] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]


@pytest.mark.notebooks
@pytest.mark.stage2
def test_stage2_recorded_numbers_match_independent_numpy(run_dir, data):
    res = results(run_dir, STAGE2)
    steps = res["updates"]["steps"]
    id_batches = [s["ids"] for s in steps]
    assert [len(ids) for ids in id_batches] == [7, 7, 7, 2, 7, 7]
    assert [i for ids in id_batches for i in ids] == idiom_ids(17, ROWS, 2)[: sum(map(len, id_batches))]
    np.testing.assert_allclose([s["loss"] for s in steps], oracle_path(data, id_batches)[0], rtol=1e-5)
    assert res["updates"]["final_step"] == len(steps)
    # the shard_map example, recomputed: the first batch's targets split 2, 2, 2, 1 over the devices
    local = res["local_means"]
    y = data.targets[id_batches[0]].astype(np.float64)
    blocks = [y[p] for p in (slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 7))]
    np.testing.assert_allclose(local["sums"], [b.sum() for b in blocks], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(local["local_means"], [b.mean() for b in blocks], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(local["mean_of_local_means"], np.mean([b.mean() for b in blocks]), rtol=1e-5)
    np.testing.assert_allclose(local["global_mean"], y.mean(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(local["max_difference"], abs(np.mean([b.mean() for b in blocks]) - y.mean()), rtol=1e-4)
    assert local["max_difference"] > 1e-3 and local["equal_counts_difference"] < 1e-6
    # the answer's reason for the refusal: JAX refuses an unreduced value under P() whatever the counts, equal ones too
    refused = res["shard_map"]
    assert "statically inferred" in refused["refused"] and refused["refused_equal_counts"] == refused["refused"]


@pytest.mark.notebooks
@pytest.mark.stage2
def test_stage2_ir_has_three_all_reduces(run_dir):
    res = results(run_dir, STAGE2)
    assert res["all_reduce"]["count"] == 3
    ir = (run_dir / res["all_reduce"]["ir_file"]).read_text()
    ops = re.findall(r'"stablehlo\.all_reduce"|stablehlo\.all_reduce\(', ir)
    assert len(ops) == 3
    assert all(line in ir for line in res["all_reduce"]["lines"]) and len(res["all_reduce"]["lines"]) == 3


@pytest.mark.notebooks
@pytest.mark.stage1
@pytest.mark.stage2
@pytest.mark.parametrize("name", [STAGE1, STAGE2])
def test_executed_without_errors(run_dir, name):
    nb = executed(run_dir, name)
    assert nb.metadata["papermill"]["exception"] is None
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells)


@pytest.mark.notebooks
@pytest.mark.long  # the stage 1 notebook in a fresh kernel for the second fixture: make test-long's
@pytest.mark.stage1
def test_stage1_with_seed29_batch10(tmp_path):
    out = runner.run(tmp_path / "seed29", seed=29, batch_size=10, notebooks=[STAGE1], html=False)
    nb = executed(out, STAGE1)
    assert nb.metadata["papermill"]["parameters"]["seed"] == 29
    res = results(out, STAGE1)
    assert [b["size"] for b in res["batches"]] == [10, 10, 3, 10, 10, 3]
    check_walk(res["batches"], 29, 10)
    assert res["coverage"]["every_id_once"] == [True, True]


def parameter_cells(nb):
    return [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]


@pytest.mark.stage1
@pytest.mark.stage2
@pytest.mark.parametrize("path", sorted(catalog.NOTEBOOK_DIR.glob("*.ipynb")), ids=lambda p: p.stem)
def test_source_notebook_is_clean(path: Path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not [c.id for c in code if c.outputs], "committed with outputs"
    assert not [c.id for c in code if c.execution_count is not None], "committed with execution counts"
    assert nb.metadata["kernelspec"]["name"] == "shardlab"
    cells = parameter_cells(nb)
    assert len(cells) == 1, f"{len(cells)} cells tagged parameters"
    assert cells[0].cell_type == "code" and cells[0] is code[0], "the parameters cell is the first code cell"
    for statement in ast.parse(cells[0].source).body:
        assert isinstance(statement, ast.Assign) and len(statement.targets) == 1, ast.unparse(statement)
        assert isinstance(statement.targets[0], ast.Name), ast.unparse(statement)
        ast.literal_eval(statement.value)  # raises unless a plain literal
    lines = [line for line in cells[0].source.splitlines() if line.strip()]
    assert all("  # " in line for line in lines), "every parameter has a trailing comment"


@pytest.mark.stage1
def test_runner_lists_stage1_and_stage2_first():
    assert catalog.NOTEBOOKS[:2] == [STAGE1, STAGE2]


@pytest.mark.notebooks
@pytest.mark.parametrize("name, stage", [(STAGE1, 1), (STAGE2, 2), ("stage3b_resume", 3)])
def test_the_check_cell_runs_the_stage_check(run_dir, name, stage):
    """The `check` cell ran the checker's own enumerated stage checks in a child interpreter, and they passed;
    it says that `make check` adds a randomised search."""
    from shardlab.checker import cli, search

    searched = [c.__name__ for c in search.checks_for(stage)]
    count = len(cli.checks_of(stage)) - len(searched)
    assert searched and count > 0
    found = results(run_dir, name)["check"]
    assert found == {"stage": stage, "passed": True, "checks": count, "failed": []}
    nb = executed(run_dir, name)
    cell = next(c for c in nb.cells if "check" in c.metadata.get("tags", []))
    shown = "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")
    assert f"stage {stage}: {count} of {count} checks passed" in shown
    assert f"make check STAGE={stage} also searches randomly drawn inputs; this cell does not" in shown
    assert "PASS" not in shown and "FAIL" not in shown  # all passed: one line of counts, no line per check
    assert shown.splitlines()[0] == f"stage {stage}: {count} of {count} checks passed"
