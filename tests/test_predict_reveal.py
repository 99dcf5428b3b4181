"""Prediction prompts: a markdown cell tagged `predict`, answered by a later code cell tagged `reveal`."""

import nbformat
import pytest

from shardlab.course import catalog

MARKED = ["stage3_orbax_lesson", "stage5_multicontroller"]  # notebooks written with predict/reveal cells


def tagged(cell, tag):
    return tag in cell.get("metadata", {}).get("tags", [])


@pytest.mark.parametrize("name", MARKED)
def test_every_prediction_has_its_reveal_before_the_next(name):
    cells = nbformat.read(catalog.NOTEBOOK_DIR / f"{name}.ipynb", as_version=4).cells
    open_prompt, prompts = None, 0
    for k, cell in enumerate(cells):
        if tagged(cell, "predict"):
            assert cell.cell_type == "markdown" and open_prompt is None, (name, k, "a predict cell before a reveal")
            open_prompt, prompts = k, prompts + 1
        if tagged(cell, "reveal"):
            assert cell.cell_type == "code" and open_prompt is not None, (name, k, "a reveal without its predict")
            assert "observed" in cell.source, (name, k)
            open_prompt = None
    assert open_prompt is None and prompts >= 2, (name, open_prompt, prompts)
    assert not any("<summary>Predict" in c.source for c in cells if c.cell_type == "markdown"), name
