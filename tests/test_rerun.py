"""Re-running is safe: after a killed stage 3 run the next run replaces its files; foreign files stay refused.

The stage 3 notebook's own code cells are executed (from the .ipynb, in order, up to the cell
tagged `control`), once in a process that is then killed with SIGKILL before the notebook
could seal its folder, then again in this process.
"""

import os
import subprocess
import sys
import textwrap

import nbformat
import pytest
from conftest import REPO

from shardlab.errors import OutputFolderError

pytestmark = pytest.mark.stage3

NOTEBOOK = REPO / "notebooks" / "stage3a_checkpoint.ipynb"
LAST = "control"  # the cells up to this one write the checkpoint, the Orbax copy and the control record


def cells_until(last: str) -> list[str]:
    """Source of the notebook's code cells in order, through the first cell tagged `last`."""
    found = []
    for cell in nbformat.read(NOTEBOOK, as_version=4).cells:
        if cell.cell_type == "code":
            found.append(cell.source)
            if last in cell.metadata.get("tags", []):
                return found
    raise AssertionError(f"{NOTEBOOK.name} has no cell tagged {last!r}")


def run_cells(out_dir) -> dict:
    """Execute the cells here with `out_dir` in place of the parameter; return their namespace."""
    namespace = {}
    sources = cells_until(LAST)
    exec(sources[0], namespace)  # the parameters cell
    namespace["out_dir"] = str(out_dir)
    for source in sources[1:]:
        exec(source, namespace)
    return namespace


KILLED = textwrap.dedent(
    """
    import os, signal
    from test_rerun import run_cells  # `python -c` in tests/ imports from there
    run_cells({out!r})
    os.kill(os.getpid(), signal.SIGKILL)  # as a killed kernel: no cleanup, no seal
    """
)


@pytest.mark.long  # a killed notebook run and a rerun: make test-long's
def test_rerunning_stage3_after_a_killed_run_replaces_its_own_files_and_refuses_foreign_ones(tmp_path):
    out = tmp_path / "lab_run"
    script = KILLED.format(out=str(out))
    command = [sys.executable, "-c", script]
    killed = subprocess.run(command, cwd=REPO / "tests", capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-2000:]
    folder = out / "stage3"
    assert (folder / "checkpoint.npz").is_file() and (folder / "orbax").is_dir(), "the killed run wrote its files"

    again = run_cells(out)  # the rerun the learner does: it must not stop at its own files
    assert again["state"]["step"] == again["save_step"] and (folder / "control.npz").is_file()
    checkpoint = (folder / "checkpoint.npz").read_bytes()

    (folder / "MY_NOTES.md").write_text("a learner's notes")
    with pytest.raises(OutputFolderError, match="MY_NOTES.md"):
        run_cells(out)
    assert (folder / "MY_NOTES.md").read_text() == "a learner's notes"
    assert (folder / "checkpoint.npz").read_bytes() == checkpoint, "a refused run removes nothing"
    assert os.path.isdir(folder / "orbax")
