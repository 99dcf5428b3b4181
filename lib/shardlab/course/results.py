"""Machine-readable cell results: kept in a results file and in the output's metadata, out of the reader's way."""

import contextlib
import json
import os

from shardlab.course import show
from shardlab.io import plain, write_json

RESULTS = "results"  # folder under the output directory
# What nobody reads on the page (a record for machines, a finished progress line) is published in a form no
# front end draws: a MIME type of its own, which neither JupyterLab nor nbconvert has a renderer for (Lab
# inserts an empty, unpadded widget in its place), and an output tag the HTML pages remove
# (shardlab.evidence.pages), so neither leaves an empty output area.
HIDDEN_MIME = "application/vnd.shardlab.record+json"
HIDDEN_TAG = "shardlab-record"
METADATA = "shardlab"  # a code cell's metadata key: its records, once the runner moved them out of the outputs
# A cell that prints the conclusion its values choose (shardlab.course.sentences) carries this tag and a folded
# source (`jupyter.source_hidden`): Lab shows its sentence, not the call that chose it, and the HTML pages leave
# its source out (shardlab.evidence.pages).
CONCLUSION_TAG = "conclusion"


def emit(out_dir: str, notebook: str, name: str, value, shown: bool = True) -> dict:
    """Store `value` in out_dir/results/<notebook>.json and in an output tagged `shardlab: name`.

    The output shows one rounded line; with `shown=False` (the usual case: the cell printed the value
    in a learner's words, or the notebook records it in a closing cell) it shows nothing at all, not
    even an empty output area (HIDDEN_MIME, HIDDEN_TAG), and the value still rides in the output's metadata.
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

        # the value rides in the output's metadata (for tests and tools); the reader sees a rounded line or nothing
        meta = {"shardlab": name, "value": value}
        if shown:
            display({"text/plain": show.line(name, value)}, raw=True, metadata=meta)
        else:
            display({HIDDEN_MIME: {"name": name}}, raw=True, metadata={**meta, "tags": [HIDDEN_TAG]})
    return value


def _in_kernel() -> bool:
    """Whether this runs inside an IPython kernel (a notebook), where outputs are displays."""
    try:
        from IPython.core.interactiveshell import InteractiveShell
    except ImportError:
        return False
    return InteractiveShell.initialized()


@contextlib.contextmanager
def progress():
    """A callback for a long cell's progress lines: each replaces the last while the cell runs, none stays after.

    In a kernel the lines go to one display that ends in the hidden form (HIDDEN_MIME), so the executed
    notebook keeps the cell's results only and no progress line; elsewhere the lines are printed.
    """
    if not _in_kernel():
        yield print
        return
    from IPython.display import display

    gone, tagged = {HIDDEN_MIME: {"name": "progress"}}, {"tags": [HIDDEN_TAG]}
    handle = display(gone, raw=True, metadata=tagged, display_id=True)
    try:
        yield lambda line: handle.update({"text/plain": str(line)}, raw=True)
    finally:
        handle.update(gone, raw=True, metadata=tagged)


def load(out_dir: str, notebook: str) -> dict:
    """Every result a notebook stored in out_dir/results/<notebook>.json."""
    with open(os.path.join(out_dir, RESULTS, f"{notebook}.json")) as handle:
        return json.load(handle)
