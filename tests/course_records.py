"""Readers of what a course run leaves behind: the library writes these records, nothing it runs reads them.

- `from_notebook(nb)`: the results an executed notebook recorded, by name, from its outputs or (once
  `shardlab.evidence.stable` moved them) from its cells' metadata; a later record of a name replaces an
  earlier one. The tests compare it with the results file the same run wrote.
- `read_reached(path)`: the API functions one kernel noted in a `SHARDLAB_REACHED` file;
  `read_reached_folder(folder)`: {notebook: those functions, every lane} from a run's `reached` folder.
"""

from pathlib import Path

from shardlab.course.results import METADATA
from shardlab.learner.implementation import API


def from_notebook(nb) -> dict:
    found = {}
    for cell in nb.cells:
        found.update(cell.get("metadata", {}).get(METADATA, {}).get("records", {}))
        for output in cell.get("outputs", []):
            meta = output.get("metadata", {})
            if meta.get("shardlab") and "value" in meta:
                found[meta["shardlab"]] = meta["value"]
    return found


def read_reached(path) -> set:
    try:
        with open(path, encoding="utf-8") as handle:
            return {line.strip() for line in handle if line.strip() in API}
    except FileNotFoundError:
        return set()


def read_reached_folder(reached: Path) -> dict:
    found = {}
    for path in sorted(Path(reached).rglob("*.txt")):
        found.setdefault(path.stem, set()).update(read_reached(path))
    return found
