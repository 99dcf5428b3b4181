"""Machine-readable cell results: kept in a results file and in the output's metadata, out of the reader's way."""

import json
import os

from shardlab.course import show
from shardlab.io import plain, write_json

RESULTS = "results"  # folder under the output directory


def emit(out_dir: str, notebook: str, name: str, value, shown: bool = True) -> dict:
    """Store `value` in out_dir/results/<notebook>.json and in an output tagged `shardlab: name`.

    The output shows one rounded line; with `shown=False` (the usual case: the cell printed the value
    in a learner's words, or the notebook records it in a closing cell) it shows nothing at all, and
    the value still rides in the output's metadata.
    """
    value = plain(value)
    folder = os.path.join(out_dir, RESULTS)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{notebook}.json")
    results = load(out_dir, notebook) if os.path.exists(path) else {}
    results[name] = value
    write_json(path, results)
    if _in_kernel():
        from IPython.display import display

        # the value rides in the output's metadata (for tests and tools); the reader sees a rounded line
        text = show.line(name, value) if shown else ""
        display({"text/plain": text}, raw=True, metadata={"shardlab": name, "value": value})
    return value


def _in_kernel() -> bool:
    try:
        from IPython.core.interactiveshell import InteractiveShell
    except ImportError:
        return False
    return InteractiveShell.initialized()


def load(out_dir: str, notebook: str) -> dict:
    """Every result a notebook stored in out_dir/results/<notebook>.json."""
    with open(os.path.join(out_dir, RESULTS, f"{notebook}.json")) as handle:
        return json.load(handle)


def from_notebook(nb) -> dict:
    """Results recorded in an executed notebook's outputs, by name (read with nbformat)."""
    found = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            meta = output.get("metadata", {})
            if meta.get("shardlab") and "value" in meta:
                found[meta["shardlab"]] = meta["value"]
    return found
