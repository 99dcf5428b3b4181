"""Machine-readable cell results: shown as JSON in the notebook and kept in a results file."""

import json
import os

RESULTS = "results"  # folder under the output directory


def _plain(value):
    """Convert NumPy scalars and arrays to JSON literals."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def emit(out_dir: str, notebook: str, name: str, value) -> dict:
    """Display `value` as JSON tagged `shardlab: name` and store it in out_dir/results/<notebook>.json."""
    value = _plain(value)
    folder = os.path.join(out_dir, RESULTS)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{notebook}.json")
    results = load(out_dir, notebook) if os.path.exists(path) else {}
    results[name] = value
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(results, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)
    if _in_kernel():
        from IPython.display import display

        text = json.dumps(value, sort_keys=True)
        display(
            {"application/json": value, "text/plain": f"{name}: {text[:2000]}"}, raw=True, metadata={"shardlab": name}
        )
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
            name = output.get("metadata", {}).get("shardlab")
            if name and "application/json" in output.get("data", {}):
                found[name] = output["data"]["application/json"]
    return found
