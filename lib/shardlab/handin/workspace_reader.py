"""What a learner wrote in their workspace notebooks: `answer` cells and the self-check letters, read, never run."""

import ast
from pathlib import Path

import nbformat

from shardlab.course import answers, selfcheck
from shardlab.course.catalog import NOTEBOOKS

SELFCHECK_TAG = "selfcheck"
CHOICES = "choices"  # the dict the self-check cell assigns


def _absent(workspace: Path | None) -> str:
    """Why nothing could be read from `workspace`."""
    if workspace is None:
        return "no workspace given"
    return f"no workspace folder {workspace} (`make lab` creates it)" if not workspace.is_dir() else ""


def _notebook(workspace: Path | None, name: str):
    path = workspace / f"{name}.ipynb" if workspace else None
    if path is None or not path.is_file():
        return None, path
    try:
        return nbformat.read(path, as_version=4), path
    except Exception:  # an unreadable copy counts as absent; the portfolio names it
        return None, path


def _tags(cell) -> list:
    return list(cell.get("metadata", {}).get("tags", []))


def written_answers(workspace: Path | None) -> dict:
    """{prompt id: {notebook, question, text, file} or {..., missing: why}} for every prompt of the course."""
    found = {}
    for name in NOTEBOOKS:
        nb, path = _notebook(workspace, name)
        for cell in nb.cells if nb else []:
            if cell.cell_type == "markdown" and answers.TAG in _tags(cell):
                ident = answers.answer_id(cell.source)
                if ident and ident not in found:
                    body = cell.source.split("\n", 1)[1].strip() if "\n" in cell.source else ""
                    found[ident] = {"text": body, "file": f"{name}.ipynb", "cell": cell.get("id")}
    out = {}
    for prompt in answers.prompts():
        entry = {"notebook": prompt.notebook, "question": prompt.question}
        if prompt.id in found and found[prompt.id]["text"]:
            out[prompt.id] = {**entry, **found[prompt.id]}
        else:
            why = _absent(workspace) or f"no `answer` cell starting `Answer: {prompt.id}` in {prompt.notebook}.ipynb"
            out[prompt.id] = {**entry, "missing": why}
    return out


def _choices(source: str) -> dict | None:
    """The literal dict assigned to `choices` in a cell's source, or None (the source is parsed, never executed)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == CHOICES for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def selfcheck_scores(workspace: Path | None) -> dict:
    """{notebook: score (see selfcheck.score) plus `file`, or {missing: why}} for every notebook with questions."""
    out = {}
    for name in NOTEBOOKS:
        if not selfcheck.questions(name):
            continue
        nb, path = _notebook(workspace, name)
        cells = [c for c in (nb.cells if nb else []) if c.cell_type == "code" and SELFCHECK_TAG in _tags(c)]
        choices = _choices(cells[-1].source) if cells else None
        if not choices:
            where = _absent(workspace) or f"no letters in the `selfcheck` cell of {name}.ipynb"
            out[name] = {"missing": where}
        else:
            out[name] = {**selfcheck.score(name, choices), "file": f"{name}.ipynb"}
    return out
