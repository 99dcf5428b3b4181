"""Which of a learner's seven functions are the course's own code, read from the file's source (never imported).

A file can pass every check without implementing anything: `from shardlab.learner.reference import *`,
`initial = reference.initial`, or a `def` whose whole body returns the course's function called on its
arguments. Its checks then judge the course, not the learner. `course_functions(path)` reads the file's
syntax tree, in the checking interpreter, where nothing the file does at run time can hide it, and names
each such function with the course object it stands for. What it cannot see: a function that reaches the
course's code some other way (through a helper of the file's own, `getattr`, `importlib`); while `grade` runs
a file, `checker/seal.py` sees those routes at run time.

The course's source pasted into the file (`pasted`) is seen by comparing each of the file's functions with
every function of the modules that implement the seven, after renaming every variable and dropping
docstrings, comments, annotations and layout: a seven-function name that is such a copy, or that reaches one
through the file's own functions, is named with the course function copied. Functions of fewer than
MIN_NODES syntax nodes are not compared. What this cannot see: a copy edited in what it computes (statements
reordered, an expression rewritten), which is then the learner's own code as far as any reading can tell.
"""

import ast

from shardlab.checker.seal import IMPLEMENTATION
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
    return {**pasted(tree), **{name: course for name, course in found.items() if course}}


# --- the course's source pasted into the file --------------------------------------------------------------
# A function's shape with every name it binds or reads renamed in order of first use, its docstring, its own
# name, decorators and annotations dropped: renaming variables, reformatting, re-commenting or renaming the
# function leaves it as it was, while any change to what it computes (an operator, a constant, an attribute, a
# call's arguments, a statement) changes it. Functions of fewer than MIN_MATCH nodes are not compared
# (`return dict(state)` is anyone's), and a seven-function name is named only when the copies it reaches hold
# MIN_NODES nodes together: the course's `draw` (four lines, ~75 nodes) is what an honest learner following
# the hints may write word for word, while the course's `initial` with the helpers it calls is not.
MIN_MATCH = 25
MIN_NODES = 120
COURSE_MODULES = IMPLEMENTATION  # where the seven and every helper they call are written (checker/seal.py)


class _Renamed(ast.NodeTransformer):
    """Every identifier a function binds or reads becomes `v<n>`, numbered by first use; attributes stay."""

    def __init__(self):
        self.seen = {}

    def _name(self, name: str) -> str:
        return self.seen.setdefault(name, f"v{len(self.seen)}")

    def visit_Name(self, node):
        return ast.copy_location(ast.Name(id=self._name(node.id), ctx=node.ctx), node)

    def visit_arg(self, node):
        return ast.copy_location(ast.arg(arg=self._name(node.arg), annotation=None), node)

    def visit_FunctionDef(self, node):
        node.returns = None
        node.decorator_list = []
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:] or [ast.Pass()]
        node.body = body
        node.name = self._name(node.name)
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node):
        node.annotation = ast.Constant(None)
        return self.generic_visit(node)

    def visit_alias(self, node):
        return ast.alias(name=node.name, asname=self._name(node.asname or node.name.split(".")[0]))

    def visit_ExceptHandler(self, node):
        node.name = self._name(node.name) if node.name else None
        return self.generic_visit(node)

    def visit_keyword(self, node):  # a keyword argument's name is part of the call, not a variable
        return self.generic_visit(node)


def shape(function) -> tuple[str, int] | None:
    """(the normalised text of a `def`, its number of nodes), None when it is below MIN_MATCH nodes."""
    copied = _Renamed().visit(ast.parse(ast.unparse(function)).body[0])  # a copy: the caller's tree is kept
    nodes = sum(1 for _ in ast.walk(copied))
    if nodes < MIN_MATCH:
        return None
    return ast.dump(copied, annotate_fields=False, include_attributes=False), nodes


def _functions(tree) -> list:
    return [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


_COURSE_SHAPES: dict = {}


def course_shapes() -> dict:
    """Normalised shape -> the course function it is (`shardlab.core.sampler.advance`), from the course's source."""
    if not _COURSE_SHAPES:
        import importlib.util

        for module in COURSE_MODULES:
            origin = importlib.util.find_spec(module).origin
            with open(origin, encoding="utf-8") as handle:
                tree = ast.parse(handle.read(), filename=origin)
            for function in _functions(tree):
                found = shape(function)
                if found is not None:
                    _COURSE_SHAPES.setdefault(found[0], f"{module}.{function.name}")
    return _COURSE_SHAPES


def _called(function) -> set:
    """Names a function calls directly (`helper(...)`), or refers to (a helper passed along)."""
    return {node.id for node in ast.walk(function) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def pasted(tree: ast.Module) -> dict:
    """API name -> the course functions whose source it holds, itself or in functions of the file it reaches.

    The file's top-level functions (and those nested in them) are compared with every function of the course's
    modules. A seven-function name is named when the copies among it and the file's own functions it reaches
    (by name, transitively) hold at least MIN_NODES nodes together; the value names the copies found.
    """
    course = course_shapes()
    top = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    copies = {}  # top-level name -> [(course function, nodes)] of the copies it holds
    for name, function in top.items():
        for inner in _functions(function):
            found = shape(inner)
            if found is not None and found[0] in course:
                copies.setdefault(name, []).append((course[found[0]], found[1]))
    named = {}
    for api in API:
        todo, seen, held = [api], set(), []
        while todo:
            name = todo.pop(0)
            if name in seen or name not in top:
                continue
            seen.add(name)
            held += copies.get(name, [])
            todo += sorted(_called(top[name]) & top.keys())
        if sum(nodes for _, nodes in held) >= MIN_NODES:
            shown = ", ".join(dict.fromkeys(course_name for course_name, _ in held))
            named[api] = f"{shown} (the course's source pasted)"
    return named
