"""Which of a learner's seven functions are the course's own code, read from the file's source (never imported).

A file can pass every check without implementing anything: `from shardlab.learner.reference import *`,
`initial = reference.initial`, or a `def` whose whole body returns the course's function called on its
arguments. Its checks then judge the course, not the learner. `course_functions(path)` reads the file's
syntax tree, in the checking interpreter, where nothing the file does at run time can hide it, and names
each such function with the course object it stands for. What it cannot see: a function that reaches the
course's code some other way (through a helper of the file's own, `getattr`, `importlib`), or the course's
source pasted into the file. While `grade` runs a file, `checker/seal.py` sees those other routes at run time.
"""

import ast

from shardlab.learner.implementation import API

COURSE = "shardlab"


def _course(name: str | None) -> bool:
    return bool(name) and (name == COURSE or name.startswith(COURSE + "."))


def _imports(tree: ast.Module) -> tuple[dict, list]:
    """(local name -> the course object or module it names, modules star-imported from the course).

    The star imports count only where no seven-function name is imported from anywhere else."""
    names, stars, elsewhere = {}, [], set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and not (node.level == 0 and _course(node.module)):
            elsewhere |= {alias.asname or alias.name for alias in node.names}
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _course(node.module):
            for alias in node.names:
                if alias.name == "*":
                    stars.append(node.module)
                else:
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _course(alias.name):
                    names[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else COURSE
    return names, [] if elsewhere & set(API) else stars


def _resolved(node, names: dict) -> str | None:
    """The course object an expression names (`reference.initial`, `initial`), or None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in names:
        return None
    return ".".join([names[node.id], *reversed(parts)])


def _delegate(function: ast.FunctionDef, names: dict) -> str | None:
    """The course function a `def` only calls and returns, or None."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Call):
        return _resolved(body[0].value.func, names)
    return None


def _definitions(tree: ast.Module) -> dict:
    """Top-level name -> the statement that defines it last (a def, a class, an assignment)."""
    defined = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined[node.name] = node
        elif isinstance(node, ast.Assign):
            defined.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
    return defined


def _course_object(node, name: str, names: dict, stars: list) -> str | None:
    if node is None:
        return names.get(name) or (f"{stars[-1]}.{name}" if stars else None)
    if isinstance(node, ast.Assign):
        return _resolved(node.value, names)
    return _delegate(node, names) if isinstance(node, ast.FunctionDef) else None


def course_functions(path: str) -> dict:
    """API name -> the course object it is in the file at `path` (only those that are); {} if unreadable."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError, RecursionError):
        return {}
    names, stars = _imports(tree)
    defined = _definitions(tree)
    found = {name: _course_object(defined.get(name), name, names, stars) for name in API}
    return {name: course for name, course in found.items() if course}
