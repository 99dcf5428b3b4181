"""What a learner wrote in their workspace notebooks: `answer` cells and the self-check letters, read, never run."""

import ast
from pathlib import Path

import nbformat

from shardlab.course import answers, selfcheck
from shardlab.course.catalog import NOTEBOOKS, OPTIONAL

SELFCHECK_TAG = "selfcheck"
CHOICES = "choices"  # the dict the self-check cell assigns
HYPOTHESIS_TAG = "hypothesis"  # stage 4a's cell that assigns the learner's hypothesis
MINE = "mine"  # the dict that cell assigns (None until the learner writes one)
HYPOTHESIS_NOTEBOOK = "stage4a_profile"
HYPOTHESIS_KEYS = ("change", "threshold_ms", "because")


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


def _assigned(source: str, name: str) -> dict | None:
    """The literal dict assigned to `name` in a cell's source, or None (the source is parsed, never executed)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return None
            return value if isinstance(value, dict) else None
    return None


def _choices(source: str) -> dict | None:
    """The literal dict assigned to `choices` in a cell's source, or None (the source is parsed, never executed)."""
    return _assigned(source, CHOICES)


def _hypothesis_problem(value: dict) -> str:
    """Why `value` is not a hypothesis stage 4a accepts in shape ('' if it is); its reach is judged by the notebook."""
    from shardlab.evidence.hypothesis import MENU

    if set(value) != set(HYPOTHESIS_KEYS):
        return f"`mine` is a dict with keys {sorted(map(str, value))}, not exactly {list(HYPOTHESIS_KEYS)}"
    if value["change"] not in MENU:
        return f"`mine['change']` is {value['change']!r}, not one of the menu's changes {sorted(MENU)}"
    threshold = value["threshold_ms"]
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold < float("inf"):
        return f"`mine['threshold_ms']` is {threshold!r}, not a number of milliseconds above 0"
    if not isinstance(value["because"], str) or not value["because"].strip():
        return "`mine['because']` is empty: say what in the trace points at the change"
    return ""


def hypothesis(workspace: Path | None) -> dict:
    """The learner's stage 4 hypothesis: {value, file} from the `mine = {...}` line of their stage 4a copy, or
    {missing: why}. Read like the answers (parsed, never run); the notebook itself judges it against a trace."""
    nb, _ = _notebook(workspace, HYPOTHESIS_NOTEBOOK)
    cells = [c for c in (nb.cells if nb else []) if c.cell_type == "code" and HYPOTHESIS_TAG in _tags(c)]
    value = _assigned(cells[-1].source, MINE) if cells else None
    if value is None:
        where = _absent(workspace) or f"`{MINE} = None` in the `{HYPOTHESIS_TAG}` cell of {HYPOTHESIS_NOTEBOOK}.ipynb"
        return {"missing": where}
    problem = _hypothesis_problem(value)
    if problem:
        return {"missing": f"{problem} ({HYPOTHESIS_NOTEBOOK}.ipynb)"}
    return {"value": value, "file": f"{HYPOTHESIS_NOTEBOOK}.ipynb"}


def selfcheck_scores(workspace: Path | None) -> dict:
    """{notebook: score (see selfcheck.score) plus `file`, or {missing: why}} for every notebook with questions;
    an optional notebook's (catalog.OPTIONAL) only when its `selfcheck` cell holds letters, never as missing."""
    out = {}
    for name in NOTEBOOKS:
        if not selfcheck.questions(name):
            continue
        nb, path = _notebook(workspace, name)
        cells = [c for c in (nb.cells if nb else []) if c.cell_type == "code" and SELFCHECK_TAG in _tags(c)]
        choices = _choices(cells[-1].source) if cells else None
        if not choices and name in OPTIONAL:
            continue
        if not choices:
            where = _absent(workspace) or f"no letters in the `selfcheck` cell of {name}.ipynb"
            out[name] = {"missing": where}
        else:
            out[name] = {**selfcheck.score(name, choices), "file": f"{name}.ipynb"}
    return out
