"""Receipts change when behaviour does: what audit.json's `sources` hash, checked on a copy of the tree.

A comment or a docstring edit of a module the run executes leaves the recorded inputs equal (no
`make run` needed); a changed constant the course uses, a changed expression, a new import or a
notebook edit changes exactly the input it touched. The edits are made to a temporary copy of
lib/shardlab, never to the checkout.
"""

import ast
import importlib
import inspect
import re
import shutil

import pytest
from conftest import REPO
from test_receipts import current_sources, stale, stale_report

from shardlab.evidence import sources

PACKAGE = REPO / "lib" / "shardlab"
# modules that read a __doc__ at run time, and why no receipt holds what they read
DOC_READERS = {
    "shardlab.cli": "names each value type's __doc__ for --help",
    "shardlab.checker.search": "the random checks' __doc__, for the checker's listing",
    "shardlab.multi.program": "the first docstring line as --help's description",
    "shardlab.handin.autograder": "the first docstring line as --help's description",
    "shardlab.checker.reuse": "the source of a learner's functions, hashed into a key for reusing verdicts",
}
# modules that import a computed name: the command table's dispatcher (a run's command is the runner above),
# the package's lazy names and the grading seal's modules (IMPLEMENTATION), each a literal module name in its
# tables (the closure follows strings: tested below)
COMPUTED_IMPORTS = {"shardlab.__main__", "shardlab", "shardlab.checker.seal"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A copy of lib/shardlab (the notebooks link copied as files) and its recorded inputs."""
    root = tmp_path_factory.mktemp("tree") / "shardlab"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root, sources.receipt_sources(root=root)


def edited(tree, rel: str, old: str, new: str):
    """Edit the copy's `rel` (one occurrence of `old`), return the stale inputs, and undo the edit."""
    root, before = tree
    path = root / rel
    text = path.read_text()
    assert text.count(old) >= 1, f"{rel} no longer holds {old!r}"
    path.write_text(text.replace(old, new, 1))
    try:
        return stale(before, sources.receipt_sources(root=root))
    finally:
        path.write_text(text)


@pytest.mark.slow  # a copy of the checkout: make test's, not the inner loop's
def test_the_copy_records_what_the_checkout_records(tree):
    root, before = tree
    assert before == sources.receipt_sources(root=PACKAGE)
    assert before == current_sources(root)  # the test's own hashing agrees with the library's


@pytest.mark.slow  # the module's copy of the checkout: make test's, not the inner loop's
def test_a_comment_or_docstring_edit_of_an_executed_module_changes_no_input(tree):
    files = sources.files(root=tree[0])  # core/state.py runs in every notebook and no notebook prints its source
    assert "shardlab.core.state" in sources.closure(files) and "shardlab.core.state" not in sources.shown_modules(files)
    assert edited(tree, "core/state.py", "\nimport ", "\n# a learner's note, added to the comment\nimport ") == []
    docstring = ast.get_docstring(ast.parse((PACKAGE / "core" / "state.py").read_text()))
    first = docstring.splitlines()[0]
    assert edited(tree, "core/state.py", first, first + " (reworded)") == []
    shown = edited(tree, "core/update.py", "\nimport ", "\n# a note in a module stage 4a prints\nimport ")
    assert shown == ["shardlab/core/update.py"]  # a printed module's comments are on the page: a changed input
    assert edited(tree, "core/checkpoint.py", '"""Write all six fields', '"""Write every field') == []


@pytest.mark.slow  # the module's copy of the checkout: make test's, not the inner loop's
def test_a_changed_constant_expression_or_import_is_a_changed_input(tree):
    assert edited(tree, "core/config.py", "LEARNING_RATE = 0.03", "LEARNING_RATE = 0.031") == [
        "shardlab/core/config.py"
    ]
    assert edited(tree, "core/config.py", "BATCH_SIZE = 7", "BATCH_SIZE = 7 + 0") == ["shardlab/core/config.py"]
    assert edited(tree, "core/update.py", "\nimport ", "\nimport fractions\nimport ") == ["shardlab/core/update.py"]


@pytest.mark.slow  # the module's copy of the checkout: make test's, not the inner loop's
def test_a_notebook_edit_is_a_changed_input_even_in_its_prose(tree):
    stale_names = edited(tree, "course/notebooks/stage1_batches.md", "# Stage 1", "# Now: Stage 1")
    assert stale_names == ["shardlab/course/notebooks/stage1_batches.md"]


def test_the_freshness_report_names_every_stale_input():
    recorded = {"a.py": "1", "b.py": "2", "c.md": "3"}
    current = {"a.py": "1", "b.py": "9", "d.py": "4"}
    assert stale_report(recorded, current) == "changed: b.py; added: d.py; removed: c.md"


def test_every_module_that_touches_a_docstring_at_run_time_is_listed():
    """A docstring left out of the hash must never be data: each module that reads or writes one is listed by name."""
    package_files = sources.files(root=PACKAGE)
    modules = sources.module_names(package_files)
    touching = {
        name
        for name, rel in modules.items()
        if re.search(r"__doc__|getdoc|getsource", (PACKAGE / rel.removeprefix("shardlab/")).read_text())
        and name != "shardlab.evidence.sources"  # names them to describe the rule
    }
    assert touching == set(DOC_READERS)
    reads = {"__doc__", "getdoc", "getsource", "help"}
    shown = sources.shown_modules(package_files)
    calls = 0
    for rel in package_files:
        if rel.endswith(".ipynb"):  # a notebook shows a docstring or a source only as `shown` finds it
            code = ast.parse(sources.notebook_code((PACKAGE / rel.removeprefix("shardlab/")).read_text()))
            names = {getattr(node, "attr", getattr(node, "id", None)) for node in ast.walk(code)}
            assert not names & (reads - {"getsource"}), (rel, names & reads)
            for node in ast.walk(code):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "getsource":
                    calls += 1
                    found = sources.shown(code, modules)
                    arg = node.args[0]
                    module, name = sources.shown_name(arg)
                    assert name in found.get(sources.bindings(code, modules).get(module), []), (
                        f"{rel}: getsource of {ast.unparse(arg)}, not a function of a module the notebook imports"
                    )
    for module, attrs in shown.items():  # the printed text is that module's own, so its whole file is hashed
        imported = importlib.import_module(module)
        for attr in attrs:
            assert inspect.getsourcefile(inspect.unwrap(getattr(imported, attr))) == inspect.getsourcefile(imported), (
                module,
                attr,
            )
    assert calls and shown, "the notebooks print some library source: the rule above must have cases"


def test_a_module_a_notebook_prints_is_hashed_whole(tmp_path):
    """A comment in a function a notebook prints changes the page, so it changes that module's recorded hash."""
    package_files = sources.files(root=PACKAGE)
    module = sorted(sources.shown_modules(package_files))[0]
    rel = sources.module_names(package_files)[module]
    copy = tmp_path / "shardlab"
    shutil.copytree(PACKAGE, copy, symlinks=False, ignore=shutil.ignore_patterns("__pycache__"))
    before = sources.receipt_sources(root=copy)
    target = copy / rel.removeprefix("shardlab/")
    target.write_text(target.read_text() + "\n# a comment the page would show\n")
    after = sources.receipt_sources(root=copy)
    assert {k for k in before if before[k] != after.get(k)} == {rel}


def computed_imports(package_files: dict) -> set[str]:
    """Modules that call importlib.import_module or __import__ with anything but a string constant."""
    found = set()
    for name, rel in sources.module_names(package_files).items():
        for node in ast.walk(ast.parse(package_files[rel].read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and node.args and not isinstance(node.args[0], ast.Constant):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in ("import_module", "__import__"):
                    found.add(name)
    return found


def test_only_the_listed_modules_import_a_computed_name():
    assert computed_imports(sources.files(root=PACKAGE)) == COMPUTED_IMPORTS
    import shardlab

    lazy = set(shardlab._MODULES.values()) | set(shardlab._NAMES)  # what `sl.name` may import on first use
    assert lazy <= sources.closure(sources.files(root=PACKAGE)), lazy - sources.closure(sources.files(root=PACKAGE))


def test_the_closure_follows_imports_strings_and_parents(tmp_path):
    root = tmp_path / "shardlab"
    for rel, text in {
        "__init__.py": "",
        "a/__init__.py": "",
        "a/b.py": "def f():\n    from shardlab.c import d\n",
        "c/__init__.py": "",
        "c/d.py": "ARGV = ['-m', 'shardlab.e']\n",
        "e/__init__.py": "",
        "e/__main__.py": "",
        "f.py": "",
        "course/notebooks/n.ipynb": '{"cells": [{"cell_type": "code", "source": ["%time\\n", "import shardlab.a.b"]}]}',
        "g.py": "",
        "course/notebooks/m.ipynb": '{"cells": [{"cell_type": "code", "source": ["shardlab.g?"]}]}',
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    found = sources.closure(sources.files(root=root), roots=())
    assert found == {
        "shardlab",
        "shardlab.a",
        "shardlab.a.b",
        "shardlab.c",
        "shardlab.c.d",
        "shardlab.e",
        "shardlab.e.__main__",
        "shardlab.g",  # named in a cell that is IPython, not Python
    }


def test_the_runtime_inputs_follow_only_requirements_that_hold_here():
    """A dependency's requirement for another Python or an extra is no input, even if something else installed it."""
    from packaging.requirements import Requirement

    assert sources._applies(Requirement("numpy>=2"))
    assert not sources._applies(Requirement('aiohttp>=3.9; python_version == "2.7"'))
    assert not sources._applies(Requirement('pytest; extra == "test"'))
    assert sources._applies(Requirement('tomli; python_version >= "3"'))
