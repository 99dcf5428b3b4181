"""Notebooks diff as text: every course notebook is paired with a MyST markdown file, and the two agree.

Edit either one, then `make sync` (jupytext --sync) before committing; the pre-commit hook runs the same check.
The learner workspace copies notebooks out, so saving in JupyterLab never touches these files.
"""

import json

import jupytext
import nbformat
import pytest
from conftest import REPO

from shardlab.core.files import sha256_file
from shardlab.course import catalog, workspace


def cells(nb):
    """What a reader of the .md sees: cell type, source and tags, in order."""
    return [(c.cell_type, c.source.strip(), sorted(c.metadata.get("tags", []))) for c in nb.cells]


@pytest.mark.parametrize("name", catalog.NOTEBOOKS)
def test_notebook_and_its_text_pair_agree(name):
    ipynb = catalog.NOTEBOOK_DIR / f"{name}.ipynb"
    text = catalog.NOTEBOOK_DIR / f"{name}.md"
    assert text.is_file(), f"{text.name} is missing: run `make sync` to write the text pair"
    paired = jupytext.read(text)
    source = nbformat.read(ipynb, as_version=4)
    assert paired.metadata["jupytext"]["formats"] == "ipynb,md:myst"
    assert source.metadata["jupytext"]["formats"] == "ipynb,md:myst"
    diff = [i for i, (a, b) in enumerate(zip(cells(source), cells(paired))) if a != b]
    assert len(source.cells) == len(paired.cells) and not diff, (
        f"{name}.ipynb and {name}.md differ (cells {diff[:5]} of {len(source.cells)} / {len(paired.cells)}); "
        "run `make sync` after editing either"
    )


def test_every_notebook_in_the_folder_is_in_the_catalog():
    found = sorted(p.stem for p in catalog.NOTEBOOK_DIR.glob("*.ipynb"))
    assert found == sorted(catalog.NOTEBOOKS)
    assert sorted(p.stem for p in catalog.NOTEBOOK_DIR.glob("*.md")) == sorted(catalog.NOTEBOOKS)


def test_file_names_sort_in_teaching_order():
    """Lab's file browser, index.html and receipts/ list by name: the names alone must give the course's order."""
    assert sorted(catalog.NOTEBOOKS) == catalog.NOTEBOOKS


def test_workspace_copies_keeps_edits_and_refreshes_untouched_copies(tmp_path):
    folder = tmp_path / "ws"
    assert set(workspace.prepare(folder).values()) == {"copied"}
    edited, stale, foreign = (folder / f"{n}.ipynb" for n in catalog.NOTEBOOKS[:3])
    course = {n: (catalog.NOTEBOOK_DIR / f"{n}.ipynb").read_bytes() for n in catalog.NOTEBOOKS}
    assert edited.read_bytes() == course[catalog.NOTEBOOKS[0]]

    edited.write_bytes(course[catalog.NOTEBOOKS[0]] + b"\n")  # the learner saved their work
    stale.write_text("an older course version")  # copied by us long ago, untouched since
    ledger = json.loads((folder / workspace.LEDGER).read_text())
    ledger[catalog.NOTEBOOKS[1]] = sha256_file(stale)
    (folder / workspace.LEDGER).write_text(json.dumps(ledger))
    foreign.unlink()
    foreign.write_text("a file of the learner's with a course name")
    ledger[catalog.NOTEBOOKS[2]] = "0" * 64
    (folder / workspace.LEDGER).write_text(json.dumps(ledger))
    notes = folder / "my_notes.md"
    notes.write_text("mine")

    status = workspace.prepare(folder)
    assert status[catalog.NOTEBOOKS[0]] == "kept" and edited.read_bytes() == course[catalog.NOTEBOOKS[0]] + b"\n"
    assert status[catalog.NOTEBOOKS[1]] == "refreshed" and stale.read_bytes() == course[catalog.NOTEBOOKS[1]]
    assert status[catalog.NOTEBOOKS[2]] == "kept" and foreign.read_text().startswith("a file of the learner")
    assert notes.read_text() == "mine"
    assert all(status[n] == "current" for n in catalog.NOTEBOOKS[3:])


def test_a_learners_cells_survive_make_lab_again(tmp_path, capsys):
    """`make lab` copies the top-level notebooks/; cells a learner added or edited are still there after a rerun."""
    from argparse import Namespace

    from nbformat.v4 import new_markdown_cell

    folder, name = tmp_path / "workspace", catalog.NOTEBOOKS[2]
    args = Namespace(folder=str(folder))  # `make lab` runs `python -m shardlab workspace $(WORKSPACE)` first
    assert workspace.main(args) == 0
    top = REPO / "notebooks" / f"{name}.ipynb"
    assert catalog.NOTEBOOK_DIR.resolve() == top.parent.resolve()
    assert (folder / f"{name}.ipynb").read_bytes() == top.read_bytes(), "the copy comes from notebooks/"
    course_before = top.read_bytes()

    nb = nbformat.read(folder / f"{name}.ipynb", as_version=4)
    nb.cells.insert(
        1, new_markdown_cell("My answer: the key hides until the next epoch.", metadata={"tags": ["answer"]})
    )
    code = next(c for c in nb.cells if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", []))
    code.source += "\nprint('my extra check')"
    nbformat.write(nb, folder / f"{name}.ipynb")

    capsys.readouterr()
    assert workspace.main(args) == 0
    said = capsys.readouterr().out
    assert "kept your edited copies" in said and name in said
    kept = nbformat.read(folder / f"{name}.ipynb", as_version=4)
    assert kept.cells[1].source.startswith("My answer") and "answer" in kept.cells[1].metadata["tags"]
    assert any("my extra check" in c.source for c in kept.cells if c.cell_type == "code")
    assert top.read_bytes() == course_before, "the course source is never touched"
