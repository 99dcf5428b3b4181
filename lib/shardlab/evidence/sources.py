"""What determines a run's receipts, hashed: audit.json's `sources`, and what the freshness test compares.

`receipt_sources()` maps each input that can change a receipt to a hash of what in it can:

- `shardlab/course/notebooks/<name>.md` and `.ipynb`: the whole file (its text is in the pages);
- every package file that is not a module (the starter template, the kernel spec): the whole file;
- every module whose source a notebook prints (`inspect.getsource(module.name)`, `shown_modules`):
  the whole file, comments and docstrings included, since the page shows them;
- every other module a run can execute, `shardlab/<path>.py`: the sha256 of `ast.dump` of its parsed
  source with the docstrings removed. The modules are the import closure (`closure`) of what the
  notebooks' code cells import and of the runner (`shardlab.course.execute`, which writes the
  audit, the pages and the index), following imports at any depth, inside functions too, the
  parent packages a submodule import runs, and module names written as strings
  (`[python, "-m", "shardlab.multi.program"]`; a package named so brings its `__main__`);
- `dist/<name>`: the installed version of every distribution shardlab's runtime depends on, at any
  depth (the pins of requirements-cpu.txt that `make venv` installs; test-only tools are not inputs).

Why an edit it ignores cannot change a receipt, and an edit that can is never ignored:
comments are not in the AST; a docstring is the first statement of a module, class or function and
is removed before the dump, and the only modules that read a `__doc__` at run time are listed, each
with why no receipt holds what it reads, in tests/test_sources.py (`DOC_READERS`), which requires
that list to be complete. Everything else a change can touch (a constant, an operator, a name, an
argument default, a decorator, an import, the order of statements) is a node or a field of the
tree, so `ast.dump` and the hash change with it. A module outside the closure is imported by
nothing the notebooks or the runner import, by name or by string; the same test file lists the
modules that import a computed name (`COMPUTED_IMPORTS`, none of which a run reaches) and requires
there to be no other.

`source_hashes()` is the other record of the code: every file of the installed package, byte for byte,
which `make bench` keeps beside its numbers and `make grade` digests for the checker it graded with.
"""

import ast
import functools
import hashlib
import json
import re
from importlib import metadata, resources

from packaging.requirements import Requirement

PACKAGE = "shardlab"
NOTEBOOKS = "course/notebooks"
RUNNER = ("shardlab.course.execute",)  # `python -m shardlab run`: what runs beside the notebooks' kernels


def files(package: str = PACKAGE, root=None) -> dict:
    """'shardlab/<path>' -> the resource of every file of the installed package, or of the copy at `root`."""
    found = {}

    def walk(node, prefix):
        for child in node.iterdir():
            name = f"{prefix}/{child.name}"
            if child.is_dir():
                if child.name != "__pycache__":
                    walk(child, name)
            elif not child.name.endswith((".pyc", ".pyo")):
                found[name] = child

    walk(resources.files(package) if root is None else root, package)
    return dict(sorted(found.items()))


def module_names(paths) -> dict:
    """{module name: 'shardlab/<path>.py'} for the importable modules among `paths` (templates are data)."""
    found = {}
    for rel in paths:
        parts = rel.removesuffix(".py").split("/")
        if not rel.endswith(".py") or "templates" in parts:
            continue
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = rel
    return found


def docstring_free_dump(text: str) -> str:
    """`ast.dump` of the parsed source with every module, class and function docstring removed."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def named(tree, modules) -> set[str]:
    """The modules of `modules` that `tree` imports (any depth) or names in a string constant."""
    return {name for name in _mentioned(tree) if name in modules}


@functools.lru_cache(maxsize=1024)
def _mentioned_in(text: str) -> frozenset:
    """`_mentioned` of a module's source; kept per text, since a check hashes the same tree many times."""
    return frozenset(_mentioned(ast.parse(text)))


@functools.lru_cache(maxsize=1024)
def _stripped_hash(text: str) -> str:
    """The sha256 of `docstring_free_dump(text)`; kept per text like `_mentioned_in`."""
    return hashlib.sha256(docstring_free_dump(text).encode()).hexdigest()


def _mentioned(tree) -> set[str]:
    """Every dotted name `tree` imports (any depth) or writes as a string constant, and each one's `__main__`."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
    found |= {f"{name}.__main__" for name in found}  # `python -m package` runs its __main__
    return found


@functools.lru_cache(maxsize=64)
def _notebook_tree(text: str) -> ast.Module:
    """The parsed code cells of an .ipynb's `text`; kept per text like `_mentioned_in` (never mutated)."""
    return ast.parse(notebook_code(text))


def notebook_code(text: str) -> str:
    """The code cells of an .ipynb as one Python source (IPython's %magics and !commands dropped)."""
    cells = [c for c in json.loads(text)["cells"] if c["cell_type"] == "code"]
    lines = [line for c in cells for line in "".join(c["source"]).splitlines()]
    return "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))


def closure(package_files: dict, roots=RUNNER) -> set[str]:
    """The modules a run can execute: what the notebooks and `roots` import, closed under imports and parents."""
    modules = module_names(package_files)
    mentions = {name: _mentioned_in(package_files[rel].read_text(encoding="utf-8")) for name, rel in modules.items()}
    todo = {PACKAGE, *roots}
    for rel, item in package_files.items():
        if rel.startswith(f"{PACKAGE}/{NOTEBOOKS}/") and rel.endswith(".ipynb"):
            text = item.read_text(encoding="utf-8")
            try:
                todo |= named(_notebook_tree(text), modules)
            except SyntaxError:  # IPython syntax beyond magics (`name?`): every module name written in it counts
                todo |= set(re.findall(r"shardlab(?:\.\w+)*", notebook_code(text))) & set(modules)
    seen = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in modules:
            continue
        seen.add(name)
        parents = {".".join(name.split(".")[:k]) for k in range(1, name.count(".") + 1)}
        todo |= ({n for n in mentions[name] if n in modules} | parents) - seen
    return seen


def bindings(tree, modules) -> dict:
    """{local name: module} for every `import shardlab.x as n` / `from shardlab.x import n` of a module in `modules`."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.asname: alias.name for alias in node.names if alias.asname and alias.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in modules:
                    found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return found


def shown(tree, modules) -> dict:
    """{module: [names]} whose source `tree` prints: `inspect.getsource(module.name)` (or of `module.Class.method`)
    of a module it imports.

    A notebook that shows a function's source shows its comments and docstrings too, so the
    receipts of such a module hash its whole text (`receipt_sources`).
    """
    bound, found = bindings(tree, modules), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "getsource":
            module, name = shown_name(node.args[0] if node.args else None)
            if module in bound:
                found.setdefault(bound[module], []).append(name)
    return found


def shown_name(arg) -> tuple:
    """(module variable, its attribute) of `module.name` or `module.Class.method`, else (None, None)."""
    names = []
    while isinstance(arg, ast.Attribute):
        names.append(arg.attr)
        arg = arg.value
    return (arg.id, names[-1]) if names and isinstance(arg, ast.Name) else (None, None)


def shown_modules(package_files: dict) -> dict:
    """{module: [names]} whose source some notebook prints (see `shown`)."""
    modules, found = module_names(package_files), {}
    for rel, item in package_files.items():
        if rel.startswith(f"{PACKAGE}/{NOTEBOOKS}/") and rel.endswith(".ipynb"):
            for module, names in shown(_notebook_tree(item.read_text(encoding="utf-8")), modules).items():
                found.setdefault(module, []).extend(names)
    return found


def receipt_sources(package: str = PACKAGE, root=None) -> dict:
    """{input: hash} of everything that determines a run's receipts (see the module docstring); `root`: a copy."""
    package_files = files(package, root)
    modules = module_names(package_files)
    run = {modules[name] for name in closure(package_files)}
    whole = {modules[name] for name in shown_modules(package_files)}  # a notebook prints their text
    found = {}
    for rel, item in package_files.items():
        if rel in run and rel not in whole:
            found[rel] = _stripped_hash(item.read_text(encoding="utf-8"))
        elif rel in whole or rel not in modules.values():
            found[rel] = hashlib.sha256(item.read_bytes()).hexdigest()
    versions = {f"dist/{name}": version for name, version in runtime_versions(package).items()}
    return dict(sorted({**found, **versions}.items()))


def source_hashes(package: str = "shardlab") -> dict:
    """'shardlab/<path>' -> sha256 of every file of the installed package, byte for byte: code, notebooks, templates.

    Read through importlib.resources, so an editable and a regular install hash the same files.
    (audit.json's `sources` hash only what can change a receipt: `receipt_sources`.)
    """
    return {rel: hashlib.sha256(item.read_bytes()).hexdigest() for rel, item in files(package).items()}


def _applies(requirement) -> bool:
    """True if a requirement holds here: no marker, or one true for this Python and platform without extras."""
    return requirement.marker is None or requirement.marker.evaluate({"extra": ""})


def runtime_versions(package: str = PACKAGE) -> dict:
    """{distribution: installed version} of `package` and everything its runtime requires, at any depth."""
    return dict(_runtime_versions(package))


@functools.lru_cache(maxsize=8)
def _runtime_versions(package: str) -> dict:
    """`runtime_versions`, read once per process: what is installed does not change while a command runs."""
    found, todo = {}, [package]
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in found:
            continue
        try:
            found[name] = metadata.version(name)
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # a requirement for another platform or Python (its marker excluded it)
        todo += [requirement.name for requirement in map(Requirement, requires) if _applies(requirement)]
    return dict(sorted(found.items()))
