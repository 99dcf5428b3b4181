"""Receipts hold no absolute paths: every path is relative to the folder it is written into."""

import os
from pathlib import Path


def relative(path, out_dir) -> str:
    """`path` relative to `out_dir`, with forward slashes (receipts never hold absolute paths)."""
    return Path(os.path.relpath(Path(path).resolve(), Path(out_dir).resolve())).as_posix()


TEXT = {".json", ".ipynb", ".html", ".txt", ".mlir", ".svg", ".md", ".csv"}  # files `relative_paths` may edit


def relative_paths(out_dir) -> None:
    """Make receipts folder-relative: papermill's input and output paths, and any path into `out_dir` in text files.

    The runner works in a staging folder that is renamed on success, so an absolute path into
    it would dangle as well as name this machine.
    """
    import nbformat  # here, not at import: a kernel that imports this module for `relative` never loads it

    root = str(Path(out_dir).resolve())
    for path in sorted(Path(out_dir).rglob("*")):
        if path.suffix == ".ipynb":
            nb = nbformat.read(path, as_version=4)
            if "papermill" in nb.metadata:
                nb.metadata.papermill["input_path"] = f"notebooks/{path.name}"  # the course folder
                nb.metadata.papermill["output_path"] = path.relative_to(out_dir).as_posix()
                nbformat.write(nb, path)
        if path.is_file() and path.suffix in TEXT:
            text = path.read_text(encoding="utf-8", errors="surrogateescape")
            if root in text:
                text = text.replace(root + "/", "").replace(root, ".")
                path.write_text(text, encoding="utf-8", errors="surrogateescape")
