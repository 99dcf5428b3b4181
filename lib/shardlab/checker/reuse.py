"""Passed verdicts kept between check runs, reused only where nothing a check depends on has changed.

A check's verdict is reused when all of these are byte-identical to the run that passed it:

- the course and the checker (every .py file of the shardlab package, hashed as one),
- the JAX and NumPy versions, the stage options (search seed, --thorough, cases),
- every function of the learner's file the check reached, and everything each of them refers to:
  the source of each function and class of the file it names (helpers, constants, other files of the
  learner's own), and the file's top-level statements that may do more than bind names (a docstring, an
  import of the standard library, the course, NumPy or JAX, and a name given a literal only bind names,
  which count where a function refers to them).

The file's name and folder are not part of it: the same functions in a copy, or in a file renamed,
reuse what passed, and a learner switching between two files keeps the passes of both (the last
`KEPT` passes of each check, most recent first).

A check depends on the learner functions it looked up *and* on those every earlier check of the run
looked up (an earlier check may have built what a later one uses, such as the compiled step), so an
edit to `save` re-runs the checks from the first that reached `save` on, and stage 1 stays reused.
Only passes are kept: a failure is always checked again. Anything that cannot be hashed (an object
without source) makes the check run again. The verdicts live in the checker's cache folder, never in
the learner's; `SHARDLAB_CHECK_CACHE=off` turns reuse off, and every reused verdict says so.
"""

import ast
import hashlib
import inspect
import json
import os
import sys
import types

import numpy as np

import shardlab.checker.compile_cache as compile_cache
from shardlab.core import files

LIBRARY = tuple(os.path.realpath(p) for p in {sys.prefix, sys.base_prefix, os.path.dirname(os.__file__)})
COURSE = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the shardlab package folder
PLAIN = (bool, int, float, complex, str, bytes, type(None))
# checks that load the learner's file in another interpreter: they depend on every function of it
EVERY_FUNCTION = frozenset({"fresh_process_resume", "contracts_agree_in_a_fresh_process"})


def course_digest() -> str:
    """sha256 over the path and bytes of every .py file of the shardlab package (course, checker, reference)."""
    digest = hashlib.sha256()
    for folder, dirs, names in sorted(os.walk(COURSE)):
        dirs.sort()
        for name in sorted(f for f in names if f.endswith(".py")):
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, COURSE).encode() + b"\0")
            with open(path, "rb") as handle:
                digest.update(handle.read() + b"\0")
    return digest.hexdigest()


def _outside(obj) -> bool:
    """True for code of the course (hashed whole) or of an installed library (its version is in the key)."""
    try:
        path = os.path.realpath(inspect.getfile(obj))
    except (TypeError, OSError):
        return isinstance(obj, types.BuiltinFunctionType) or type(obj).__module__ in ("builtins",)
    return path.startswith(COURSE) or path.startswith(LIBRARY)


class Unhashable(Exception):
    """A value a learner function refers to whose content cannot be written down: no reuse."""


def _code_names(code: types.CodeType) -> set:
    names = set(code.co_names) | set(code.co_freevars)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _value(value, module, seen: set, parts: list) -> None:
    """Add what `value` is (its source, its bytes) to `parts`, following what its code refers to."""
    if isinstance(value, PLAIN):
        parts.append(repr(value))
        return
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        parts.append(f"array {value.dtype.str} {value.shape} {hashlib.sha256(value.tobytes()).hexdigest()}")
    elif isinstance(value, (tuple, list, frozenset, set, dict)):
        _container(value, module, seen, parts)
    elif isinstance(value, types.ModuleType):
        if value is module or not _outside(value):
            raise Unhashable(f"module {value.__name__}")
        parts.append(f"module {value.__name__}")
    elif getattr(value, "__wrapped__", None) is not None and not isinstance(value, types.FunctionType):
        parts.append(f"wrapped {type(value).__name__}")  # functools.wraps, jax.jit
        _value(value.__wrapped__, module, seen, parts)
    elif isinstance(value, (types.FunctionType, type)):
        _code(value, module, seen, parts)
    else:
        raise Unhashable(f"a {type(value).__name__} object")  # an instance: its state cannot be written down here


def _container(value, module, seen: set, parts: list) -> None:
    parts.append(type(value).__name__)
    items = value.items() if isinstance(value, dict) else [(item, None) for item in value]
    if isinstance(value, (set, frozenset)):
        items = sorted(items, key=repr)
    for key, item in items:
        _value(key, module, seen, parts)
        _value(item, module, seen, parts)


def _code(value, module, seen: set, parts: list) -> None:
    """A function or class: its name if the course's or a library's, else its source and what it refers to."""
    if _outside(value):
        parts.append(f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}")
        return
    try:
        parts.append(inspect.getsource(value))
    except (OSError, TypeError):
        raise Unhashable(repr(value)) from None
    if isinstance(value, types.FunctionType):
        _function_refs(value, module, seen, parts)
    else:  # a class: what each of its methods refers to
        for member in vars(value).values():
            member = getattr(member, "__func__", member)
            if isinstance(member, types.FunctionType):
                _function_refs(member, module, seen, parts)


def _function_refs(function: types.FunctionType, module, seen: set, parts: list) -> None:
    for default in (function.__defaults__ or ()) + tuple((function.__kwdefaults__ or {}).values()):
        _value(default, module, seen, parts)
    for cell in function.__closure__ or ():
        _value(cell.cell_contents, module, seen, parts)
    scope = function.__globals__
    for name in sorted(_code_names(function.__code__)):
        if name in scope:
            parts.append(f"name {name}")
            _value(scope[name], module, seen, parts)


# modules whose import does nothing but bind names: the standard library, the course, and the arrays libraries
# whose versions are in the key (an import of any other module, the learner's own among them, may run code)
QUIET_IMPORTS = frozenset(sys.stdlib_module_names) | {"shardlab", "numpy", "jax"}


def _binds_only(node: ast.stmt) -> bool:
    """A statement whose only effect is to bind names: a docstring, an import of QUIET_IMPORTS, a name given a
    literal. A function sees what it binds only through the names it refers to, which its digest hashes by value."""
    if isinstance(node, ast.Expr):
        return isinstance(node.value, ast.Constant)
    if isinstance(node, ast.Import):
        return all(alias.name.partition(".")[0] in QUIET_IMPORTS for alias in node.names)
    if isinstance(node, ast.ImportFrom):
        return not node.level and (node.module or "").partition(".")[0] in QUIET_IMPORTS
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        named = all(
            isinstance(t, ast.Name) or (isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts))
            for t in targets
        )
        try:
            ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False
        return named
    return False


def _top_level(module) -> str:
    """The file's statements that may do more than bind names (set-up code, an import of the learner's own
    module, a name given a computed value): any of them may change any function, so each digest holds them."""
    path = getattr(module, "__file__", None)
    if not path:
        return ""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    definitions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    kept = [n for n in tree.body if not isinstance(n, definitions) and not _binds_only(n)]
    return ast.dump(ast.Module(body=kept, type_ignores=[]))


def function_digests(module, names) -> dict:
    """API name -> sha256 of everything that function is and refers to (None where it cannot be hashed)."""
    top = _top_level(module)
    found = {}
    for name in names:
        parts = [top]
        try:
            _value(getattr(module, name), module, set(), parts)
        except Unhashable:
            found[name] = None
            continue
        found[name] = hashlib.sha256("\n".join(parts).encode()).hexdigest()
    return found


class Tracker:
    """The learner functions looked up through it since the run began (the implementation seen by the checks)."""

    def __init__(self, impl, names):
        self._impl, self._names, self.reached = impl, set(names), set()

    def __getattr__(self, name):
        if name in self._names:
            self.reached.add(name)
        return getattr(self._impl, name)


KEPT = 8  # passes kept per check, one for each distinct set of the functions it depended on


class Verdicts:
    """The kept passes under one set of options, whichever file passed them."""

    def __init__(self, options: dict, digests: dict, names):
        """`digests`: function_digests of the file, as the interpreter that loaded it computed them."""
        import jax

        self.folder = compile_cache.folder()
        self.names = tuple(names)
        try:
            self.functions = {name: digests.get(name) for name in names}
            course = course_digest()
        except (OSError, SyntaxError, ValueError):
            self.folder = None
            return
        key = dict(options)
        key.update(jax=jax.__version__, numpy=np.__version__, course=course)
        self.key = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        self.path = os.path.join(self.folder, "verdicts", f"{self.key}.json") if self.folder else None
        self.kept = {}
        if self.path and os.path.exists(self.path):
            try:
                with open(self.path, encoding="utf-8") as handle:
                    self.kept = json.load(handle)
            except (OSError, ValueError):
                self.kept = {}

    def _digests(self, reached) -> dict | None:
        found = {name: self.functions.get(name) for name in sorted(reached)}
        return None if any(v is None for v in found.values()) else found

    def _passes(self, check: str) -> list:
        passes = self.kept.get(check)
        return passes if isinstance(passes, list) else []

    def reusable(self, check: str, reached) -> dict | None:
        """A kept passing result of `check` whose every function it depended on is unchanged."""
        if not self.path:
            return None
        for kept in self._passes(check):
            now = {name: self.functions.get(name) for name in kept["depends"]}
            if any(v is None for v in now.values()) or now != kept["depends"]:
                continue
            if set(reached) <= set(kept["depends"]):
                return kept
        return None

    def keep(self, check: str, result: dict, reached) -> None:
        """Keep a pass, most recent first; a failure forgets the pass of these very functions, if one was kept."""
        digests = self._digests(reached)
        if not self.path or digests is None:
            return
        others = [p for p in self._passes(check) if p["depends"] != digests]
        self.kept[check] = ([{"result": result, "depends": digests}] if result.get("passed") else []) + others
        self.kept[check] = self.kept[check][:KEPT]

    def save(self) -> None:
        """Write the kept verdicts (a new file renamed over the old: a reader never sees half of it)."""
        if not self.path:
            return
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            files.replace(self.path, json.dumps(self.kept))
        except OSError:
            pass
