"""Receipts that change between two runs only where a measurement changed.

Papermill gives its injected-parameters cell a new random id and stamps every cell with
wall-clock times; a staging folder from `tempfile` is private (0700) and so is a file written
through `mkstemp`. `notebook` fixes the first two in one executed notebook, `modes` the last
for a whole output folder. The notebook-level papermill start, end and duration stay: they
are this run's timing.
"""

import os
from pathlib import Path

import nbformat

INJECTED_ID = "injected-parameters"  # papermill's cell tag, also a valid, stable cell id
CELL_CLOCKS = ("start_time", "end_time", "duration")  # papermill's per-cell wall-clock fields


def notebook(path) -> None:
    """Rewrite the executed notebook at `path` with a fixed id for the injected cell and no per-cell clocks."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if INJECTED_ID in cell.metadata.get("tags", []):
            cell["id"] = INJECTED_ID
        cell.metadata.pop("execution", None)  # the kernel's iopub/shell timestamps
        for name in CELL_CLOCKS:
            cell.metadata.get("papermill", {}).pop(name, None)
    nbformat.write(nb, path)


def modes(out_dir) -> None:
    """Give every folder and file in `out_dir` the modes the umask asks for (0755 and 0644 by default)."""
    umask = os.umask(0)
    os.umask(umask)
    root = Path(out_dir)
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)
