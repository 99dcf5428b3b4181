"""The package's shape: no import cycles, a small core that stands alone, one home for the state schema.

The library (lib/shardlab) holds what the notebooks, learners and instructors import; the rig that
attacks and certifies it (the top-level `rig/` package) and the tests stand above it and import it,
never the other way round.
"""

import ast
import collections
import functools
import json
import re

import pytest
from conftest import REPO

from shardlab.course import catalog

PACKAGE = REPO / "lib" / "shardlab"
CORE_LINE_BUDGET = 1000  # the part the four stage notebooks need, read in one sitting
# the layers the core calls for mechanics a learner is not asked to read: file publication and bounded reads,
# and the defence in depth against hostile archives; each small, each with its own budget
CORE_LAYERS = {"shardlab.core.files": 220, "shardlab.core.archive": 200}
LOW = ("shardlab.core", "shardlab.verify", "shardlab.orbax_io", "shardlab.learner")
EXTENSIONS = ("shardlab.multi", "shardlab.checker", "shardlab.perf")
ABOVE = ("rig", "tests", "conftest")  # what stands above the library: the rig and the test suite


@functools.cache
def parsed(path) -> ast.Module:
    """A module's syntax tree, read and parsed once per session: several tests walk every module of the package."""
    return ast.parse(path.read_text())


@pytest.fixture(scope="module", autouse=True)
def library_parsed_once():
    """Every library module parsed before this module's first test. A module-scoped fixture makes the module one
    unit of work for the scheduler (tests/conftest.py, `whole_modules`), so one worker parses the library once
    for all its tests, instead of each worker parsing it again."""
    for path in PACKAGE.rglob("*.py"):
        if "__pycache__" not in path.parts:
            parsed(path)


def module_name(path):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def imports(path) -> frozenset:
    """Every shardlab module `path` imports, at top level or inside functions (walked once per session, like
    `parsed`: every test that builds the import graph asks again)."""
    found = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("shardlab")}
        elif (
            isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("shardlab") and node.level == 0
        ):
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return frozenset(found)


def graph():
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    edges = {}
    for name, path in modules.items():
        targets = {t for t in imports(path) if t in modules and t != name}
        edges[name] = targets - {"shardlab"}  # the package face imports everything; nothing may need it back
    return modules, edges


def find_cycle(edges):
    """One import cycle as a list of modules, or None (depth-first search with colours)."""
    colour, stack = {}, []

    def visit(node):
        colour[node] = "grey"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if colour.get(nxt) == "grey":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in colour and (cycle := visit(nxt)):
                return cycle
        colour[node] = "black"
        stack.pop()
        return None

    for node in sorted(edges):
        if node not in colour and (cycle := visit(node)):
            return cycle
    return None


@functools.cache
def foreign_imports(path) -> frozenset[str]:
    """The top-level names outside shardlab that `path` imports, at top level or inside functions."""
    found = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return frozenset(found - {"shardlab"})


def test_no_library_module_imports_the_rig_or_the_tests():
    offenders = {
        module_name(p): sorted(foreign_imports(p) & set(ABOVE))
        for p in PACKAGE.rglob("*.py")
        if foreign_imports(p) & set(ABOVE)
    }
    assert not offenders, f"library modules import what stands above the library: {offenders}"


def test_the_import_check_finds_a_planted_import_of_the_rig(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text("def f():\n    from rig.torture import outcome\n    import tests.conftest\n")
    assert foreign_imports(planted) & set(ABOVE) == {"rig", "tests"}


def reaches_above(text: str) -> set[str]:
    """What of the rig or the tests `text` (Python source) reaches: imported, at any depth, or named as a
    module in a string (`python -m rig.loops`, `import_module("rig.torture")`), as a child process would run it."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] in ABOVE}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in ABOVE:
            found.add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found |= set(re.findall(r"(?:^|-m\s+)((?:rig|tests)(?:\.\w+)+|rig)$", node.value.strip()))
    return found


def course_sources() -> dict[str, str]:
    """{name: Python source} of everything the course runs: every library module, the starter template and
    every notebook's code cells (IPython's `%` and `!` lines left out)."""
    found = {
        p.relative_to(REPO).as_posix(): p.read_text() for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts
    }
    for notebook in sorted((REPO / "notebooks").glob("*.ipynb")):
        cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
        lines = [line for c in cells for line in "".join(c["source"]).splitlines() + [""]]
        found[notebook.name] = "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))
    return found


def test_nothing_the_course_runs_reaches_the_rig_or_the_tests():
    """The library, the starter template and the notebooks neither import the rig or the tests nor start them."""
    sources = course_sources()
    assert len([name for name in sources if name.endswith(".ipynb")]) == len(catalog.NOTEBOOKS)
    assert "lib/shardlab/learner/templates/starter.py" in sources
    offenders = {name: sorted(found) for name, text in sources.items() if (found := reaches_above(text))}
    assert not offenders, f"the course reaches what stands above it: {offenders}"


def test_the_reach_check_finds_planted_imports_and_commands():
    planted = (
        "import json\nfrom rig.torture import outcome\nimport tests.budget as b\n"
        "def f():\n    import importlib\n    importlib.import_module('rig.grade_attacks')\n"
        "cmd = [sys.executable, '-m', 'rig.loops']\nline = 'python -m rig'\nprose = 'the rig stands above'\n"
    )
    assert reaches_above(planted) == {"rig.torture", "tests.budget", "rig.grade_attacks", "rig.loops", "rig"}
    assert reaches_above("import rigid\nfrom testsuite import x\nname = 'rig.txt is a file'\n") == set()


def test_the_commands_are_the_librarys_and_the_wheel_holds_no_rig():
    """Every `python -m shardlab` command is a library module; the package is found under lib/ only,
    so an installed course has no rig; the rig's campaigns are each one `make` target."""
    from shardlab.__main__ import COMMANDS

    outside = {name: module for name, (module, _) in COMMANDS.items() if not module.startswith("shardlab.")}
    assert not outside, f"commands whose module is not the library's: {outside}"
    assert all((PACKAGE.parent / (module.replace(".", "/") + ".py")).is_file() for module, _ in COMMANDS.values())
    found = re.search(
        r"\[tool\.setuptools\.packages\.find\]\s*where\s*=\s*\[([^\]]*)\]", (REPO / "pyproject.toml").read_text()
    )
    assert found and re.findall(r'"([^"]+)"', found.group(1)) == ["lib"]
    makefile = (REPO / "Makefile").read_text()
    for campaign in ("rig.torture", "rig.bench", "rig.loops", "rig.grade_attacks"):
        assert len(re.findall(rf"^\t\$\(BIN\)/python -m {re.escape(campaign)} ", makefile, re.M)) == 1, campaign


TEMPLATE = PACKAGE / "learner" / "templates" / "starter.py"  # package data a learner copies: its functions are theirs


def test_the_import_graph_is_printed(capsys):
    """The graph between the library's units (subpackages and top-level modules), and the rig's use of it."""
    modules, edges = graph()
    between = {}
    for name, targets in edges.items():
        between.setdefault(unit(name), set()).update(unit(t) for t in targets if unit(t) != unit(name))
    rig_uses = set()
    for path in (REPO / "rig").rglob("*.py"):
        rig_uses |= {unit(t) for t in imports(path) if t in modules or t.rsplit(".", 1)[0] in modules}
    with capsys.disabled():
        print("\nimport graph of lib/shardlab (unit -> units it imports):")
        for name in sorted(between):
            print(f"  {name:12} -> {', '.join(sorted(between[name])) or '-'}")
        print(f"  {'rig':12} -> {', '.join(sorted(rig_uses))}  (above the library; nothing imports it)")
    assert "core" in between and not between["core"] - {"core"}
    assert rig_uses and "rig" not in between


def test_find_cycle_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_the_library():
    _, edges = graph()
    assert find_cycle(edges) is None, f"import cycle: {' -> '.join(find_cycle(edges))}"


def test_core_imports_only_the_core_and_stays_small():
    modules, edges = graph()
    core = {name: path for name, path in modules.items() if name.startswith("shardlab.core")}
    outside = {name: sorted(t for t in edges[name] if not t.startswith("shardlab.core")) for name in core}
    assert not any(outside.values()), (
        f"core modules import outside the core: { {k: v for k, v in outside.items() if v} }"
    )
    size = {name: len(path.read_text().splitlines()) for name, path in core.items()}
    lines = sum(n for name, n in size.items() if name not in CORE_LAYERS)
    assert lines < CORE_LINE_BUDGET, f"the core has {lines} lines; keep it under {CORE_LINE_BUDGET}"
    big = {name: size[name] for name, budget in CORE_LAYERS.items() if size.get(name, 0) >= budget}
    assert not big, f"core layers over their budget {CORE_LAYERS}: {big}"


def test_nothing_low_imports_an_extension():
    _, edges = graph()
    low = [n for n in edges if n.startswith(LOW)]
    bad = {n: sorted(t for t in edges[n] if t.startswith(EXTENSIONS)) for n in low}
    assert not any(bad.values()), f"course modules import extensions: { {k: v for k, v in bad.items() if v} }"


def test_the_state_fields_are_written_down_once():
    spelled = re.compile(r'"weights",\s*"momentum",\s*"key",\s*"order",\s*"cursor",\s*"step"')
    homes = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if spelled.search(p.read_text())]
    assert homes == ["core/schema.py"], f"the six-field tuple is spelled out in {homes}; import it from core/schema.py"


# One home per mechanism: the call that carries each mechanism, and the one module that may make it.
# (qualifier, name): `os.killpg` or `from os import killpg`; a None qualifier matches the attribute on any object.
MECHANISMS = {
    ("os", "killpg"): "shardlab.process_group",  # a signal to a whole process group
    ("tempfile", "mkstemp"): "shardlab.core.files",  # a temporary file, named by the one scheme
    ("os", "O_NOFOLLOW"): "shardlab.core.files",  # a read that follows no link: the bounded read
    ("os", "link"): "shardlab.core.files",  # exclusive publication of a new file
    ("os", "fsync"): "shardlab.core.files",  # a file or folder flushed to disk (`files.sync`)
    (None, "file_size"): "shardlab.core.files",  # a zip member's declared size, bounded before it is read
    ("zipfile", "write"): "shardlab.io",  # a zip written (zipfile.ZipFile opened with "w", "a" or "x")
}


def mechanisms(tree: ast.Module) -> set[tuple]:
    """The MECHANISMS keys whose call, attribute or import appears in `tree` (code only, never text in strings)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            found |= {key for key in MECHANISMS if key[1] == node.attr and key[0] in (None, owner)}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {(node.module, a.name) for a in node.names if (node.module, a.name) in MECHANISMS}
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "ZipFile":
            modes = [a for a in node.args[1:2]] + [k.value for k in node.keywords if k.arg == "mode"]
            if any(isinstance(m, ast.Constant) and m.value in ("w", "a", "x") for m in modes):
                found.add(("zipfile", "write"))
    return found


def test_each_mechanism_has_one_home():
    modules, _ = graph()
    uses = {name: mechanisms(parsed(path)) for name, path in modules.items()}
    homes = {key: sorted(name for name, found in uses.items() if key in found) for key in MECHANISMS}
    wrong = {f"{q or '*'}.{n}": found for (q, n), found in homes.items() if found != [MECHANISMS[(q, n)]]}
    assert not wrong, f"a mechanism written outside its one home, or its home lost it: {wrong}; see MECHANISMS"


def test_the_mechanism_check_finds_planted_second_homes():
    planted = ast.parse(
        "import os, zipfile\nfrom tempfile import mkstemp\n"
        "def f(p, info):\n    os.killpg(1, 9)\n    fd = os.open(p, os.O_NOFOLLOW)\n    os.fsync(fd)\n"
        "    zipfile.ZipFile(p, mode='w')\n    return info.file_size, 'os.link(a, b)'\n"
    )
    assert mechanisms(planted) == {
        ("os", "killpg"),
        ("tempfile", "mkstemp"),
        ("os", "O_NOFOLLOW"),
        ("os", "fsync"),
        (None, "file_size"),
        ("zipfile", "write"),
    }  # os.link inside a string is text, not a call


def test_the_library_does_not_locate_the_checkout():
    offenders = [
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*.py")
        if re.search(r"__file__\)?\.?\s*\)?\.(resolve\(\)\.)?parents?\b", p.read_text())
    ]
    assert not offenders, f"{offenders} find files through __file__; pass folders in or use importlib.resources"


def test_the_notebooks_have_one_home_at_the_top():
    """`notebooks/` beside `lib/` is the one copy; the package's notebook folder is a link to it."""
    top = REPO / "notebooks"
    link = REPO / "lib" / "shardlab" / "course" / "notebooks"
    assert top.is_dir() and not top.is_symlink()
    assert link.is_symlink() and link.resolve() == top.resolve()
    assert {p.stem for p in top.glob("*.ipynb")} == set(catalog.NOTEBOOKS)


DESIGN = REPO / "docs" / "design.md"
SHARED_LINE = "The modules beside the subpackages"  # the paragraph of docs/design.md naming the shared modules


def import_targets(path, modules) -> set[str]:
    """The shardlab modules `path` imports: `from shardlab.x import y` counts `shardlab.x.y` when it is a module."""
    return import_targets_of(parsed(path), modules)


def import_targets_of(tree: ast.AST, modules) -> set[str]:
    """`import_targets` of a syntax tree (a module, or one import statement)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("shardlab"):
            named = {f"{node.module}.{alias.name}" for alias in node.names}
            found |= (named & set(modules)) or {node.module}
    return found


def unit(module: str) -> str:
    """`core` for shardlab.core.x, `io` for shardlab.io: the subpackage or top-level module a module belongs to."""
    return module.split(".")[1] if "." in module else module


def design_rows(text: str) -> dict[str, tuple[str, str]]:
    """{subpackage: (its `holds` cell, its `may import` cell)} of docs/design.md's subpackage table."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 3:
            rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


def design_table() -> tuple[dict[str, list[str]], list[str]]:
    """({subpackage: what its row says it may import}, the shared modules) as docs/design.md writes them."""
    text = DESIGN.read_text()
    rows = {name: re.findall(r"`([\w.]+)`", imports) for name, (_, imports) in design_rows(text).items()}
    paragraph = " ".join(next((p for p in text.split("\n\n") if p.startswith(SHARED_LINE)), "").split())
    shared = re.findall(r"`([\w.]+)`", paragraph.split(" import only ")[0])  # the names before "import only"
    assert rows and shared, f"{DESIGN} lost its subpackage table or the sentence starting {SHARED_LINE!r}"
    return rows, shared


def named(entry: str) -> str:
    """The module an entry of the table names: `shardlab` is the package face, `core` is shardlab.core."""
    return entry if entry == "shardlab" else f"shardlab.{entry}"


def disallowed(modules, rows, shared) -> dict[str, list[str]]:
    """{module: what it imports that the table does not allow}, over `modules` {name: path}.

    The core may import only the core; a shared module the core and the shared modules; any
    other subpackage those, and what its row names (a subpackage, or one of its modules).
    """
    bad = {}
    for name, path in modules.items():
        here = unit(name)
        if here not in rows and here not in shared:
            continue  # the package face and __main__ (which imports every command by name)
        allowed = ["core"] if here == "core" else ["core", *shared, *([] if here in shared else rows[here])]
        found = [
            t
            for t in sorted(import_targets(path, modules))
            if unit(t) != here and not any(t == named(a) or t.startswith(f"{named(a)}.") for a in allowed)
        ]
        if found:
            bad[name] = found
    return bad


def test_the_table_check_finds_planted_imports(tmp_path):
    planted = {
        "evidence/a.py": "from shardlab.perf import bench, packed\nimport shardlab.io\nimport shardlab.core.config\n",
        "core/b.py": "import shardlab.io\n",
        "io.py": "from shardlab.perf.packed import step\n",
    }
    modules = {}
    for rel, text in {**planted, "core/config.py": "", "perf/bench.py": "", "perf/packed.py": ""}.items():
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(text)
        modules["shardlab." + rel.removesuffix(".py").replace("/", ".")] = tmp_path / rel
    rows = {"core": ["core"], "evidence": ["perf.packed"], "perf": []}
    assert disallowed(modules, rows, ["io"]) == {
        "shardlab.evidence.a": ["shardlab.perf.bench"],
        "shardlab.core.b": ["shardlab.io"],
        "shardlab.io": ["shardlab.perf.packed"],
    }


def test_each_subpackage_imports_only_what_the_design_table_says():
    modules, _ = graph()
    rows, shared = design_table()
    subpackages = {unit(n) for n, p in modules.items() if p.parent != PACKAGE}
    assert set(rows) == subpackages, f"docs/design.md's table: rows {sorted(rows)}, subpackages {sorted(subpackages)}"
    assert rows["core"] == ["core"] and set(shared) <= {unit(n) for n, p in modules.items() if p.parent == PACKAGE}
    bad = disallowed(modules, rows, shared)
    assert not bad, f"imports docs/design.md's subpackage table does not allow: {bad}"


def design_holds(text: str) -> dict[str, set[str]]:
    """{subpackage: the names its row of docs/design.md's table puts in backticks in the `holds` column}."""
    return {name: set(re.findall(r"`([\w./]+)`", holds)) for name, (holds, _) in design_rows(text).items()}


def test_a_design_row_that_names_modules_names_every_module_of_its_subpackage():
    """A row names its modules in backticks (or, like `checker`'s, none); a module added or removed shows here,
    and a bare name in backticks must be a module of the subpackage or a name one of them defines."""
    modules, _ = graph()
    held = design_holds(DESIGN.read_text())
    for subpackage, named in held.items():
        present = {n.split(".")[2] for n in modules if unit(n) == subpackage and n.count(".") == 2}
        if not named & present:
            continue  # the row describes the subpackage as a whole
        assert present <= named, f"docs/design.md's {subpackage} row leaves out {sorted(present - named)}"
        bound = set().union(*(defined(modules[n]) for n in modules if unit(n) == subpackage))
        stale = {n for n in named - present - bound if re.fullmatch(r"[a-z_]+", n) and n != subpackage}
        assert not stale, f"docs/design.md's {subpackage} row names {sorted(stale)}: no module or name of it"


TWO_WAY = "Subpackages that import each other"  # the paragraph of docs/design.md above the two-way table


def import_statements(tree: ast.Module, at_top: bool):
    """(node, whether it runs when the module is imported) of every import in `tree`; a function's body runs later."""
    pending = [(node, at_top) for node in ast.iter_child_nodes(tree)]
    while pending:
        node, top = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, top
        inner = top and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        pending += [(child, inner) for child in ast.iter_child_nodes(node)]


def two_way(modules) -> dict[str, str]:
    """{"a → b": "module level" | "inside a function only"} for each direction between two subpackages that
    import each other (the package face and the shared modules beside the subpackages left out)."""
    how: dict[tuple, bool] = {}  # (from, to) -> whether some import of that direction runs at import time
    for name, path in modules.items():
        if path.parent == PACKAGE:
            continue
        for node, top in import_statements(parsed(path), True):
            for target in import_targets_of(node, modules) & set(modules):
                if modules[target].parent != PACKAGE and unit(target) != unit(name):
                    key = (unit(name), unit(target))
                    how[key] = how.get(key, False) or top
    said = {True: "module level", False: "inside a function only"}
    return {f"{a} → {b}": said[top] for (a, b), top in how.items() if (b, a) in how}


def design_two_way(text: str) -> dict[str, str]:
    """{direction: how} as the table after docs/design.md's TWO_WAY paragraph writes it."""
    after = text.split(TWO_WAY, 1)[1]
    rows = [line.strip().strip("|").split("|") for line in after.split("\n\n")[1].splitlines()[2:]]
    return {cells[0].strip(): cells[1].strip() for cells in rows}


def test_the_subpackages_that_import_each_other_are_the_ones_design_md_lists():
    modules, _ = graph()
    found, written = two_way(modules), design_two_way(DESIGN.read_text())
    assert found == written, f"docs/design.md's two-way table says {written}; the import graph shows {found}"


def test_the_two_way_check_tells_a_module_level_import_from_one_inside_a_function():
    tree = ast.parse("import a\nclass C:\n    import b\ndef f():\n    import c\n    g = lambda: __import__('d')\n")
    assert sorted((node.names[0].name, top) for node, top in import_statements(tree, True)) == [
        ("a", True),
        ("b", True),
        ("c", False),
    ]


README = REPO / "README.md"
LISTED = ("lib/shardlab", "rig")  # the folders whose every entry the README's layout block names


def readme_layout(text: str) -> dict[str, set[str]]:
    """{folder: the entries its lines name} from the README's `## Layout` code block.

    A line at the left margin names a folder (`rig/`); each line indented by two spaces below it
    starts with one entry of that folder (`torture/`, `io.py`); deeper lines continue a description.
    """
    section = text.split("\n## Layout\n", 1)[1]
    block = section.split("```text\n", 1)[1].split("\n```", 1)[0]
    found, folder = {}, None
    for line in block.splitlines():
        if line and not line.startswith(" "):
            folder = line.split()[0].rstrip("/")
            found[folder] = set()
        elif line.startswith("  ") and not line.startswith("   ") and folder is not None:
            found[folder].add(line.split()[0].rstrip("/"))
    return found


def tree_entries(folder) -> set[str]:
    """The files and folders in `folder` (bytecode caches and hidden names left out)."""
    return {p.name for p in folder.iterdir() if p.name != "__pycache__" and not p.name.startswith(".")}


def test_the_readme_layout_lists_the_tree():
    listed = readme_layout(README.read_text())
    for folder in LISTED:
        named, present = listed.get(folder, set()), tree_entries(REPO / folder)
        assert named == present, (
            f"README.md's layout of {folder}/ names {sorted(named - present)} that the tree lacks "
            f"and leaves out {sorted(present - named)}"
        )


def test_the_layout_check_finds_a_missing_and_a_stale_entry():
    text = "intro\n## Layout\n\n```text\nrig/          the rig\n  cli.py      its parser\n  gone.py     old\n```\n"
    assert readme_layout(text) == {"rig": {"cli.py", "gone.py"}}
    listed, present = readme_layout(text)["rig"], tree_entries(REPO / "rig")
    assert "gone.py" in listed - present and "torture" in present - listed


DOCS = (README, *sorted((REPO / "docs").glob("*.md")))
FILE_ENDINGS = {"json", "pb", "zip", "png", "svg", "html", "npz", "ipynb", "md", "py"}  # `shardlab.json` is a file
NAMED_MODULE = re.compile(r"`((?:shardlab|rig)(?:\.\w+)+)")
NAMED_PATH = re.compile(r"\b((?:lib|tests|rig|docs|notebooks)/[\w./-]*\w(?:::\w+)?)")


def defined(path) -> set[str]:
    """Every name a module binds anywhere (def, class, assignment, import); the face adds what it serves lazily."""
    found = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    if path == PACKAGE / "__init__.py":
        import shardlab  # the face: its __getattr__ serves the names __all__ lists

        found |= set(shardlab.__all__)
    return found


def module_source(root, parts: list[str]):
    """The file that defines the module `parts` (a package's __init__.py), or None."""
    place = root.joinpath(*parts)
    for candidate in (place / "__init__.py", place.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def longest_module(base, parts: list[str]):
    """(the file of the longest prefix of `parts` that is a module under `base`, the parts after it); (None, parts)."""
    for i in range(len(parts), 0, -1):
        source = module_source(base, parts[:i])
        if source is not None:
            return source, parts[i:]
    return None, parts


def stale_names(text: str, root=REPO) -> list[str]:
    """The modules, attributes and repository paths `text` names that the tree under `root` does not hold.

    `shardlab.a.b.name`: the longest prefix that is a module must define `name` (one level: an attribute
    of an attribute is not followed); `tests/x.py::name`: the file must exist and define `name`; any
    other path under lib/, tests/, rig/, docs/ or notebooks/ must exist (bench/ holds outputs, not sources).
    """
    stale = []
    for dotted in sorted(set(NAMED_MODULE.findall(text))):
        parts = dotted.split(".")
        if parts[-1] in FILE_ENDINGS:
            continue
        base = root / "lib" if parts[0] == "shardlab" else root
        source, rest = longest_module(base, parts)
        if source is None or (rest and rest[0] not in defined(source)):
            stale.append(dotted)
    for named in sorted(set(NAMED_PATH.findall(text))):
        path, _, name = named.partition("::")
        if not (root / path).exists() or (name and name not in defined(root / path)):
            stale.append(named)
    return stale


def test_every_module_and_path_the_docs_name_exists():
    stale = {doc.name: found for doc in DOCS if (found := stale_names(doc.read_text()))}
    assert not stale, f"these pages name modules, attributes or files the tree no longer holds: {stale}"


def test_the_name_check_finds_stale_modules_attributes_and_paths():
    text = (
        "`shardlab.core.files.publish_new` and `shardlab.core.files.publish_old`, `shardlab.gone.module`, "
        "`shardlab.json`, `shardlab.initial`, tests/test_layout.py::graph, tests/test_layout.py::no_such_helper, "
        "lib/shardlab/outdir.py and lib/shardlab/legacy.py"
    )
    assert stale_names(text) == [
        "shardlab.core.files.publish_old",
        "shardlab.gone.module",
        "lib/shardlab/legacy.py",
        "tests/test_layout.py::no_such_helper",
    ]


FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants in `tree`: prose, not a name a program looks up."""
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, *FUNCTIONS))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def bindings(tree: ast.AST, modules) -> dict[str, tuple]:
    """{local name: ("module", name) | ("from", module, name)} of every shardlab import in `tree`, at any depth."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "shardlab":
                    found[alias.asname or "shardlab"] = ("module", alias.name if alias.asname else "shardlab")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("shardlab"):
            for alias in node.names:
                whole = f"{node.module}.{alias.name}"
                found[alias.asname or alias.name] = (
                    ("module", whole) if whole in modules else ("from", node.module, alias.name)
                )
    return found


class Reach:
    """Which top-level functions, classes and methods of `trees` ({module: syntax tree}) run from the roots.

    A name resolves through the module's own definitions and imports (the package face through its lazy
    table); `x.name` on anything else than a module reaches every method called `name` of a class reached (one
    that no reached code names is never made, so its methods never run); a string that is one
    identifier or a dotted path (a getattr by name, `python -m shardlab.x`, a traitlets class) reaches what it
    names, and so does a call a message shows (`check_case(...)`). A module reached runs its top-level
    statements and has its module-level special functions; a class reached, its special and decorated methods,
    and all of them where it extends a class from outside the library (the framework calls them) or looks its
    own methods up by a computed name. `face` is {name: binding} of what the package face serves lazily.
    """

    def __init__(self, trees: dict, face: dict[str, tuple]):
        self.trees, self.face, self.reached, self.pending = trees, face, set(), []
        self.called = set()  # every `x.name` a reached definition uses on anything else than a module
        self.nodes, self.by_name, self.names = {}, collections.defaultdict(set), {}
        self.prose = set().union(*(docstrings(tree) for tree in trees.values()))
        for module, tree in trees.items():
            own = {}
            for node in tree.body:
                if isinstance(node, (ast.ClassDef, *FUNCTIONS)):
                    own[node.name] = ("def", f"{module}:{node.name}")
                    self.define(f"{module}:{node.name}", node)
                    for method in node.body if isinstance(node, ast.ClassDef) else ():
                        if isinstance(method, FUNCTIONS):
                            self.define(f"{module}:{node.name}.{method.name}", method)
            self.names[module] = {**bindings(tree, trees), **own}

    def define(self, key: str, node) -> None:
        self.nodes[key] = node
        self.by_name[key.rsplit(".", 1)[-1].split(":")[-1]].add(key)

    def attribute(self, module: str, name: str) -> list[tuple]:
        """What `module.name` is: a submodule, a definition, or what the module imported under that name."""
        if module == "shardlab" and name in self.face:
            return [self.face[name]]
        if f"{module}.{name}" in self.trees:
            return [("module", f"{module}.{name}")]
        bound = self.names.get(module, {}).get(name)
        return [bound] if bound else []

    def binding(self, bound: tuple, depth: int = 0) -> None:
        if bound[0] == "def":
            self.pending.append(("def", bound[1]))
        elif bound[0] == "module":
            self.pending.append(("module", bound[1]))
        elif depth < 8:  # ("from", module, name): a re-export is followed a few levels
            self.pending.append(("module", bound[1]))
            for inner in self.attribute(bound[1], bound[2]):
                self.binding(inner, depth + 1)

    def scan(self, node: ast.AST, names: dict) -> None:
        """Queue what `node` uses, its names resolved through `names`."""
        for child in ast.walk(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for bound in bindings(child, self.trees).values():
                    self.binding(bound)
            elif isinstance(child, ast.Name) and child.id in names:
                self.binding(names[child.id])
            elif isinstance(child, ast.Attribute):
                self.attribute_use(child, names)
            elif isinstance(child, ast.Constant) and isinstance(child.value, str) and id(child) not in self.prose:
                self.string(child.value.strip())

    def attribute_use(self, node: ast.Attribute, names: dict) -> None:
        """Queue `a.b.c`: through the modules `a` and `a.b` are, else every method called `c` of a reached class
        (and note `c`, for the classes reached later: `visit_class`)."""
        chain, base = [node.attr], node.value
        while isinstance(base, ast.Attribute):
            chain, base = [base.attr, *chain], base.value
        bound = names.get(base.id) if isinstance(base, ast.Name) else None
        if not bound or bound[0] != "module":
            self.called.add(node.attr)
            self.pending += [
                ("def", key)
                for key in self.by_name[node.attr]
                if "." in key.split(":")[1] and ("def", key.rsplit(".", 1)[0]) in self.reached
            ]
            return
        found = [bound]
        for name in chain:
            found = [t for b in found if b[0] == "module" for t in self.attribute(b[1], name)]
            for b in found:
                self.binding(b)

    def string(self, text: str) -> None:
        """Queue what a string names to run or look up: modules (`-m shardlab.x`), `shardlab.x.attr`, an identifier."""
        named = [text] if re.fullmatch(r"shardlab(\.\w+)*", text) else re.findall(r"-m\s+(shardlab[\w.]*)", text)
        for dotted in named:  # a whole string (import_module, a traitlets class) or a `-m` command line
            parts = dotted.split(".")
            for i in range(1, len(parts) + 1):
                if (prefix := ".".join(parts[:i])) in self.trees:
                    self.pending += [("module", prefix), ("module", f"{prefix}.__main__")]
                elif i > 1 and ".".join(parts[: i - 1]) in self.trees:
                    for bound in self.attribute(".".join(parts[: i - 1]), parts[i - 1]):
                        self.binding(bound)
        words = re.split(r"[.:]", text) if re.fullmatch(r"[\w.:]+", text) else re.findall(r"(\w+)\(", text)
        for word in words:  # a name looked up, or a call a message shows (`check_case(...)`)
            self.pending += [("def", key) for key in self.by_name.get(word, ())]

    def visit(self, kind: str, name: str) -> None:
        if (
            (kind, name) in self.reached
            or (kind == "module" and name not in self.trees)
            or (kind == "def" and name not in self.nodes)
        ):
            return
        self.reached.add((kind, name))
        if kind == "module":
            self.visit_module(name)
            return
        module = name.partition(":")[0]
        self.pending.append(("module", module))
        if isinstance(self.nodes[name], ast.ClassDef):
            self.visit_class(name, self.nodes[name], self.names[module])
        else:
            self.scan(self.nodes[name], self.names[module])

    def visit_module(self, name: str) -> None:
        """Its packages run first; then what runs on import: statements, decorators, base classes."""
        parts = name.split(".")
        self.pending += [("module", ".".join(parts[:i])) for i in range(1, len(parts))]
        for node in self.trees[name].body:
            if isinstance(node, FUNCTIONS) and node.name.startswith("__"):  # PEP 562's __getattr__, __dir__
                self.pending.append(("def", f"{name}:{node.name}"))
            heads = [*node.decorator_list, *getattr(node, "bases", [])] if hasattr(node, "decorator_list") else [node]
            for head in heads:
                self.scan(head, self.names[name])

    def visit_class(self, name: str, node: ast.ClassDef, names: dict) -> None:
        foreign = any(not (isinstance(b, ast.Name) and names.get(b.id, ("",))[0] == "def") for b in node.bases)
        foreign = foreign or any(  # a class that looks its own methods up by a computed name (a dispatch table)
            isinstance(call, ast.Call)
            and getattr(call.func, "id", None) == "getattr"
            and len(call.args) > 1
            and getattr(call.args[0], "id", None) == "self"
            and not isinstance(call.args[1], ast.Constant)
            for call in ast.walk(node)
        )
        for part in node.body:
            if isinstance(part, FUNCTIONS):
                if foreign or part.name.startswith("__") or part.decorator_list or part.name in self.called:
                    self.pending.append(("def", f"{name}.{part.name}"))
            else:
                self.scan(part, names)
        for head in [*node.bases, *node.decorator_list, *(k.value for k in node.keywords)]:
            self.scan(head, names)

    def run(self, roots: list[tuple], sources: dict[str, ast.AST]) -> list[str]:
        """The definitions nothing reached from `roots` (("module" | "def", name)) and `sources` (code that
        imports the library: notebooks, a template) reaches, sorted."""
        self.pending += roots
        for tree in sources.values():
            self.scan(tree, bindings(tree, self.trees))
        while self.pending:
            self.visit(*self.pending.pop())
        return sorted(set(self.nodes) - {name for kind, name in self.reached if kind == "def"})

    def unreached_modules(self) -> list[str]:
        """The modules that no import, command line or whole string of what `run` reached names, sorted."""
        return sorted(set(self.trees) - {name for kind, name in self.reached if kind == "module"})


def course_roots(modules) -> list[tuple]:
    """What a learner or an instructor starts: the package face, each `python -m shardlab` command's module with
    its `main` and `add_arguments`, each `-m shardlab...` of the Makefile, and the reference implementation (loaded
    by path, as a learner's file is)."""
    from shardlab.__main__ import COMMANDS

    roots = [("module", "shardlab"), ("module", "shardlab.__main__"), ("module", "shardlab.learner.reference")]
    for module, _ in COMMANDS.values():
        roots += [("module", module), ("def", f"{module}:main"), ("def", f"{module}:add_arguments")]
    roots += [("module", m) for m in re.findall(r"-m (shardlab[\w.]*)", (REPO / "Makefile").read_text())]
    reference = parsed(PACKAGE / "learner" / "reference.py")
    roots += [("def", f"shardlab.learner.reference:{n.name}") for n in reference.body if isinstance(n, FUNCTIONS)]
    return roots


def test_every_library_module_and_definition_runs_from_what_the_course_starts():
    """Every module, function, class and method of the library is reached from a notebook, the starter template
    or a command through the calls and imports between them: one that only the tests or the rig reach (directly,
    or through another such) belongs beside them (rig/, tests/). The starter template is the learner's."""
    import shardlab

    modules, _ = graph()
    trees = {name: parsed(path) for name, path in modules.items() if path != TEMPLATE}
    sources = {name: ast.parse(text) for name, text in course_sources().items() if not name.startswith("lib/")}
    sources["starter"] = parsed(TEMPLATE)
    face = {name: ("module", module) for name, module in shardlab._MODULES.items()}
    face |= {name: ("from", module, name) for name, module in shardlab._ATTRIBUTES.items()}
    reach = Reach(trees, face)
    unreached = set(reach.run(course_roots(modules), sources))
    assert not reach.unreached_modules(), f"nothing the course runs imports or starts {reach.unreached_modules()}"
    assert not unreached, (
        f"defined in the library, reached by nothing the course runs (only tests or the rig?): {sorted(unreached)}"
    )


def test_the_reach_check_finds_what_only_an_unreached_definition_or_prose_names():
    trees = {
        "shardlab": ast.parse(""),
        "shardlab.a": ast.parse(
            "from shardlab import b\n"
            "def used():\n    return b.helper()\n"
            "def lonely():\n    return only_lonely_uses()\n"
            "def only_lonely_uses():\n    return 1\n"
            "class Kept:\n    def __init__(self):\n        pass\n    def called(self):\n        pass\n"
            "    def never(self):\n        pass\n"
            "class Idle:\n    def called(self):\n        pass\n"
        ),
        "shardlab.b": ast.parse(
            '"""Tests import shardlab.orphan; prose that names it is no reach."""\n'
            "def helper():\n    return ['python', '-m', 'shardlab.child'], 'shardlab.a:Kept'\n"
            "def run():\n    return x.called()\n"
            "def refuse():\n    raise ValueError('see help(shardlab.orphan)')\n"
        ),
        "shardlab.child": ast.parse("import sys\nif sys.argv:\n    print()\n"),
        "shardlab.orphan": ast.parse(""),
    }
    reach = Reach(trees, {})
    assert reach.run([("def", "shardlab.a:used")], {}) == [  # a string names Kept: its __init__ runs, no more
        "shardlab.a:Idle",
        "shardlab.a:Idle.called",
        "shardlab.a:Kept.called",
        "shardlab.a:Kept.never",
        "shardlab.a:lonely",
        "shardlab.a:only_lonely_uses",
        "shardlab.b:refuse",
        "shardlab.b:run",
    ]
    assert reach.unreached_modules() == ["shardlab.orphan"]  # `-m shardlab.child` runs it; prose runs nothing
    notebook = {"nb": ast.parse("import shardlab.b as sb\nsb.run()\n")}  # x.called(): `called` of a reached class
    assert Reach(trees, {}).run([("def", "shardlab.a:used")], notebook) == [
        "shardlab.a:Idle",  # nothing names Idle: no instance of it is made, so x.called() never runs its method
        "shardlab.a:Idle.called",
        "shardlab.a:Kept.never",
        "shardlab.a:lonely",
        "shardlab.a:only_lonely_uses",
        "shardlab.b:refuse",
    ]
