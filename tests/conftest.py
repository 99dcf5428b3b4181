"""Shared fixtures. The notebooks run once per session into a temporary folder (`run_dir`).

Every test that reads notebook results uses `run_dir`, so `make test` executes each stage
notebook exactly once, in fresh kernels, exactly as `make run` does. The suite runs on two
pytest-xdist workers (`-n 2 --dist loadgroup` in pyproject.toml): every test that uses `run_dir`
goes to one worker, and the other runs the rest of the suite meanwhile.
"""

import fcntl
import json
import os
import tempfile
import time
from pathlib import Path

import budget
import numpy as np
import pytest
from course_records import from_notebook

import shardlab as sl
from shardlab.course import execute as runner
from shardlab.course import results as record

REPO = Path(__file__).resolve().parents[1]  # the checkout, for tests only; the library never needs it
# the rig (REPO/rig) is not installed: pyproject's `pythonpath = ["."]` lets the tests import it from the checkout

sl.setup_devices(4)
# nbformat, which the workers import while collecting, skips jsonschema's IRI grammars as the course runner does (the
# larger part of its import's CPU time); no test checks a string format with jsonschema in this process
runner._without_iri_grammars()
CHECK_CACHE = "SHARDLAB_CHECK_CACHE"  # the checker's folder of compiled programs and passed verdicts
VERDICTS = "verdicts"  # the sub-folder of CHECK_CACHE where the checker keeps passed verdicts (checker/reuse.py)


def _check_cache(config) -> None:
    """The checker keeps compiled programs and passed verdicts in the user's cache folder; the suite keeps its own,
    so no earlier run on this machine lands in, or is read from, the user's.

    `make test` (and CI) starts from a new, empty folder each session. The inner loop (`--quick`) keeps one folder
    per checkout between its sessions, so a run after an edit loads every program the edit left unchanged instead
    of compiling it again; it empties the verdicts at each session's start (in the process that starts the xdist
    workers, before they start), so every check still runs in every session, as it does in `make test`. A kept
    program is the one a compile would give (JAX keys each on the program, its options, the JAX version and the
    devices): keeping them changes how long a session takes, never what a test observes.
    """
    if CHECK_CACHE in os.environ:  # chosen by the caller, or set by the process that started this xdist worker
        return
    if not config.getoption("quick", False):
        os.environ[CHECK_CACHE] = tempfile.mkdtemp(prefix="shardlab-test-check-cache-")
        return
    import hashlib
    import shutil

    checkout = hashlib.sha256(str(REPO).encode()).hexdigest()[:16]
    kept = Path(tempfile.gettempdir()) / f"shardlab-test-programs-{os.getuid()}" / checkout
    kept.mkdir(parents=True, exist_ok=True, mode=0o700)
    shutil.rmtree(kept / VERDICTS, ignore_errors=True)
    os.environ[CHECK_CACHE] = str(kept)


def _share_compiled_programs() -> None:
    """JAX's persistent compilation cache for the tests' own interpreters (every xdist worker), in that folder.

    Many tests build the same step again (a new jit of the same program for every check, fixture or
    variant); with the cache a second build loads the executable the first one compiled. JAX keys each
    entry on the program, its options, the JAX version and the devices, so a hit gives the program a
    compile would: it changes how long a test takes, never what it observes. Set through jax.config,
    not the environment: no child process (a kernel, a controller, a fresh interpreter) inherits it.
    """
    if os.environ[CHECK_CACHE].lower() == "off":
        return
    import jax

    jax.config.update("jax_compilation_cache_dir", os.environ[CHECK_CACHE])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def _warm_workers(config) -> None:
    """One fork server per interpreter that runs tests (each xdist worker; not xdist's controller): every
    learner file a test checks is loaded by a fork of it, which has imported JAX and the worker's modules
    already, instead of by a new interpreter (checker/forkserver.py: each fork is a copy of the server from
    before any file ran, so verdicts stay independent). Started at the first file a test checks (a test
    process that checks none, such as the pytest runs tests start themselves, never starts one); ended with
    the session."""
    import atexit

    import shardlab.checker.early as early
    import shardlab.checker.forkserver as forkserver

    controller = not hasattr(config, "workerinput") and config.getoption("numprocesses", None) not in (None, 0)
    if not controller:
        if os.environ.get(forkserver.OFF, "").lower() != "off":
            LAZY_SERVER[:] = [early.server_environment()]  # the environment now, before any test changes it
        forkserver.launch = _starting_the_server(forkserver.launch)
        atexit.register(forkserver.stop)


LAZY_SERVER: list = []  # the environment of this interpreter's fork server, until the first launch starts it


def _starting_the_server(launch):
    """`forkserver.launch` that first starts the server LAZY_SERVER holds, if this process has none yet."""
    import shardlab.checker.forkserver as forkserver

    def launching(*args, **kwargs):
        if not forkserver._SERVER and LAZY_SERVER:
            forkserver._SERVER.append(forkserver.Server(LAZY_SERVER.pop()))
        return launch(*args, **kwargs)

    return launching


@pytest.fixture(scope="session")
def mesh():
    return sl.make_mesh(4)


@pytest.fixture(scope="session")
def data():
    return sl.teaching_fixture()


@pytest.fixture(scope="session")
def heldout(tmp_path_factory) -> Path:
    """The held-out learner files (tests/heldout/), made from their bases and diffs, each checked against its hash."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("heldout_files", REPO / "tests" / "heldout" / "files.py")
    files = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(files)
    return files.materialise(tmp_path_factory.mktemp("heldout"))


COURSE_GROUP = "course_run"  # the xdist group of every test that reads the session's course run


def session_folder(tmp_path_factory) -> Path:
    """This session's temporary root: under pytest-xdist the folder every worker's own basetemp sits in."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory):
    """A complete `python -m shardlab run` (seed 17, batch 7) into a fresh folder, once per session.

    A file lock makes it once per session even if two xdist workers ask: the first runs the
    course, a later one waits for it and reuses its folder (or fails with its error), never runs it again.
    """
    shared = session_folder(tmp_path_factory) / "course-run"
    shared.mkdir(exist_ok=True)
    status = shared / "status.json"
    with open(shared / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not status.exists():
            try:
                out = runner.run(shared / "receipts", seed=17, batch_size=7)
            except BaseException as exc:
                status.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
                raise
            status.write_text(json.dumps({"out": str(out)}))
    found = json.loads(status.read_text())
    if "error" in found:
        pytest.fail(f"this session's course run failed (in another xdist worker): {found['error']}")
    return Path(found["out"])


@pytest.hookimpl(tryfirst=True)
def pytest_itemcollected(item):
    """A test that reads the session's course run executes the notebooks, and a `long` one (`make test-long`'s
    whole-program runs) is slow: both marked before -m or --quick select."""
    if "run_dir" in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.notebooks)
    if item.get_closest_marker("long") and not item.get_closest_marker("slow"):
        item.add_marker(pytest.mark.slow)


@pytest.hookimpl(trylast=True)  # after deselection (-m, -k) and after xdist's own hook
def pytest_collection_modifyitems(config, items):
    """Under `--dist loadgroup`, make the tests that read the course run one unit of work, listed first.

    xdist groups by an `@group` suffix of the node id, which xdist 3.8.0 writes where pytest 9.2 no
    longer reads it (a pytest-xdist 3.8.0 bug, upstream #1386), so the suffix is written here, through
    tests/_xdist.py. Without it the lock in `run_dir` still runs the course once; a second worker would only
    wait for it.
    """
    import _xdist

    course = [item for item in items if "run_dir" in getattr(item, "fixturenames", ())]
    for item in course:
        item.add_marker(pytest.mark.xdist_group(COURSE_GROUP))
    if not getattr(config.option, "loadgroup", False):
        return
    for item in course:
        _xdist.group_node_id(item, COURSE_GROUP)
    whole = whole_modules([item for item in items if item not in course])
    placed = set(course)
    modules = [item for item in items if item not in placed and _module(item) in whole]
    for item in modules:
        _xdist.group_node_id(item, f"{MODULE_GROUP}{_module(item)}")
    placed.update(modules)
    # the longest units first, so that no worker is left with one at the end while the other idles: the
    # course run, then the modules sharing a fixture (each one unit), then single tests; the same order in every worker
    items[:] = course + modules + [item for item in items if item not in placed]


MODULE_GROUP = "module:"  # the xdist group of a module whose tests share a module- or class-scoped fixture


def shared_scopes(item) -> set:
    """The scopes narrower than the session of the fixtures `item` uses that outlive one test (module, class...)."""
    info = getattr(item, "_fixtureinfo", None)
    definitions = [d for defs in (info.name2fixturedefs.values() if info else ()) for d in defs]
    return {d.scope for d in definitions} & {"module", "class", "package"}


def _module(item) -> str | None:
    module = getattr(item, "module", None)
    return module.__name__ if module is not None else None


def whole_modules(items) -> set:
    """Modules with a test using a module-, class- or package-scoped fixture: one unit each, set up once."""
    return {_module(item) for item in items if shared_scopes(item)} - {None}


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` with the course run first, then every other test its own unit of work, except
    the tests of a module that shares a module- or class-scoped fixture (one unit: that fixture is built once).

    The course run is the longest unit, so it starts at once on one worker; the whole modules follow
    (pytest_collection_modifyitems lists them next), then single tests one at a time, so that neither
    worker waits while the other has a long module left.
    """
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class CourseRunFirst(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.endswith(f"@{COURSE_GROUP}"):
                return COURSE_GROUP
            before, module_group, name = nodeid.rpartition(f"@{MODULE_GROUP}")
            return f"{MODULE_GROUP}{name}" if module_group else nodeid

    config.option.loadscopereorder = False  # keep the workers' order, in which the course run leads
    return CourseRunFirst(config, log)


def course_run(data, mesh, seed, batch_size, steps, start=None, step=None, transition=sl.transition, placed=None):
    """(state, losses, ids) of `steps` transitions from `start` (default: step 0), one dispatch each: the course's,
    or `transition` with `step` reading the `placed` dataset where given."""
    step = step or sl.make_step(mesh)
    state, losses, ids = start or sl.initial(seed, data, mesh), [], []
    for _ in range(steps):
        state, loss, batch_ids = transition(state, data if placed is None else placed, batch_size, step, mesh)
        losses.append(loss)
        ids.append(batch_ids)
    return state, np.asarray(losses, np.float32), ids


def oracle_path(data, id_batches, weights=None, momentum=None) -> tuple[list, np.ndarray, np.ndarray]:
    """(pre-update losses, weights, momentum) after one float64 oracle update per batch of `id_batches`, every row
    valid, from `weights` and `momentum` (zeros where None): NumPy alone, no course function."""
    from shardlab.verify import oracle

    zeros = np.zeros(data.features.shape[1])
    w, v, losses = zeros if weights is None else weights, zeros if momentum is None else momentum, []
    for ids in id_batches:
        w, v, loss, _ = oracle.momentum_step(data.features[ids], data.targets[ids], np.ones(len(ids)), w, v)
        losses.append(loss)
    return losses, w, v


def idiom_batches(seed: int, rows: int, batch_size: int, steps: int) -> list:
    """The ids of the first `steps` batches of `rows` rows in the course's split-then-permute order (the oracle's
    epochs, each cut into batch_size ids and a remainder)."""
    from shardlab.verify import oracle

    epochs = -(-steps // -(-rows // batch_size))  # batches per epoch: rows / batch_size, rounded up
    orders = [e["order"] for e in oracle.idiom_epochs(seed, rows, epochs)]
    return [order[i : i + batch_size] for order in orders for i in range(0, rows, batch_size)][:steps]


def proc_state(pid: int) -> str | None:
    """The one-letter state /proc gives `pid` (T: stopped, Z: zombie), None when there is no such process: read
    from the kernel, not from the module under test."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def running(pid: int) -> bool:
    """True while `pid` exists and is neither a zombie nor dead."""
    return proc_state(pid) not in (None, "Z", "X")


def until(condition, seconds: float = 10.0, every: float = 0.05) -> bool:
    """Whether `condition()` holds within `seconds`, asked every `every` s."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not condition():
        time.sleep(every)
    return condition()


def ended(pids, seconds: float = 10.0) -> bool:
    """True once none of `pids` runs (each gone, or a zombie), within `seconds`."""
    return until(lambda: not any(running(pid) for pid in pids), seconds)


def npz_members(path) -> dict:
    """{member: array} of an NPZ, read with NumPy alone (no shardlab code) and pickles refused."""
    import numpy as np

    with np.load(path, allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def cell_tags(cell) -> set:
    """The tags of a notebook cell (nbformat or JSON)."""
    return set(cell.get("metadata", {}).get("tags", []))


def executed(run_dir, name):
    """The executed notebook `name` from a run, read with nbformat."""
    import nbformat  # here, not at the top: xdist's controller loads this file too and never reads a notebook

    nb = nbformat.read(run_dir / f"{name}.ipynb", as_version=4)
    assert nb.metadata["papermill"]["exception"] is None, f"{name} recorded an exception"
    return nb


def results(run_dir, name):
    """Results recorded in the executed notebook's outputs, cross-checked with the results file."""
    found = from_notebook(executed(run_dir, name))
    assert found == record.load(run_dir, name), f"{name}: notebook outputs and results file disagree"
    return found


# --- the inner loop: `make test-quick` (pytest --quick) --------------------------------------------------------

# A test that executes a notebook, starts a controller group or runs a learner's file through the course
# carries one of these markers (a test reading `run_dir` gets `notebooks` when collected); --quick deselects them
# all, and `slow` too, and then refuses, inside the selected tests, the things these markers stand for.
LOOP_MARKERS = ("notebooks", "controllers", "learner_run", "slow")
QUICK = "not (" + " or ".join(LOOP_MARKERS) + ")"
REFUSED_MODULES = ("papermill", "ipykernel")  # a notebook run, or a kernel in this process (nbconvert needs nbclient)
# argv words of a child that is a kernel, a notebook run or a controller: the child itself, not a command
# that may start one (`python -m shardlab run --seed 1.5` only refuses its argument), is what is refused
REFUSED_COMMANDS = (
    ("shardlab.multi.program",),
    ("ipykernel_launcher",),
    ("papermill",),
    ("jupyter",),
    ("jupyter-lab",),
)


def pytest_addoption(parser):
    parser.addoption(
        "--quick",
        action="store_true",
        help=f"the inner loop: only tests selected by -m '{QUICK}'; a selected test that imports "
        f"{'/'.join(REFUSED_MODULES)} or starts a kernel or a controller group fails and names its missing marker",
    )


def _unmarked(what: str) -> None:
    pytest.fail(  # an OutcomeException (a BaseException): a library's `except Exception` does not swallow it
        f"--quick: this test {what}; mark it with one of {', '.join(LOOP_MARKERS)} (tests/conftest.py, "
        "README 'Tests'), so that `make test-quick` leaves it to `make test`",
        pytrace=True,
    )


class _RefuseLoopImports:
    """A meta-path finder: importing a module of REFUSED_MODULES fails the test that does it."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED_MODULES:
            _unmarked(f"imports {name} (a kernel or a notebook run)")
        return None


def refused_command(argv) -> str | None:
    """The REFUSED_COMMANDS entry a child's argv matches (as a space-joined string), else None."""
    words = [os.path.basename(str(a)) for a in ([argv] if isinstance(argv, (str, bytes, os.PathLike)) else argv)]
    words = [w for word in words for w in str(word).split()]
    for pattern in REFUSED_COMMANDS:
        if pattern[0] in words:
            at = words.index(pattern[0])
            if tuple(words[at : at + len(pattern)]) == pattern:
                return " ".join(pattern)
    return None


_RUNNING = {}  # the test whose setup, call or teardown runs now (its markers allow or refuse a child)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _RUNNING["item"] = item
    try:
        return (yield)
    finally:
        _RUNNING.pop("item", None)


def _guard_children() -> None:
    """In every run, --quick or not: a test without a LOOP_MARKERS marker may not start a kernel,
    a notebook run or a controller group in a child process (kernels start as children too)."""
    import subprocess

    original = subprocess.Popen.__init__

    def checked(self, args, *rest, **options):
        item = _RUNNING.get("item")
        marked = item is None or any(item.get_closest_marker(name) for name in LOOP_MARKERS)
        found = None if marked else refused_command(args)
        if found:
            _unmarked(f"starts a child process `{found} ...` (a kernel, a notebook run or a controller group)")
        original(self, args, *rest, **options)

    subprocess.Popen.__init__ = checked


def _running_unmarked() -> bool:
    """True while the setup, call or teardown of a test without a LOOP_MARKERS marker runs."""
    item = _RUNNING.get("item")
    return item is not None and not any(item.get_closest_marker(name) for name in LOOP_MARKERS)


def _guard_imports() -> None:
    """In every run, --quick or not: a test without a LOOP_MARKERS marker may not import REFUSED_MODULES.

    Checked at each import statement (builtins.__import__) and importlib.import_module, so it holds
    even when an earlier, marked test on the same worker has loaded the module already (`make test`);
    --quick also refuses the modules' first load anywhere (_RefuseLoopImports).
    """
    import builtins
    import importlib

    statement, by_name = builtins.__import__, importlib.import_module

    def refuse(name) -> None:
        if isinstance(name, str) and name.split(".")[0] in REFUSED_MODULES and _running_unmarked():
            _unmarked(f"imports {name} (a kernel or a notebook run)")

    def checked_statement(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0:
            refuse(name)
        return statement(name, globals, locals, fromlist, level)

    def checked_by_name(name, package=None):
        if not name.startswith("."):
            refuse(name)
        return by_name(name, package)

    builtins.__import__, importlib.import_module = checked_statement, checked_by_name


def pytest_configure(config):
    _check_cache(config)
    _share_compiled_programs()
    _guard_children()
    _guard_imports()
    _warm_workers(config)
    if not config.getoption("quick", False):
        return
    given = config.option.markexpr
    config.option.markexpr = f"({given}) and {QUICK}" if given else QUICK
    os.environ[budget.QUICK] = "1"  # before collection imports a test module: see tests/budget.py
    import sys

    already = sorted(name for name in REFUSED_MODULES if name in sys.modules)
    if already:  # imported before any test ran (a plugin, conftest): the guard could not see who
        raise pytest.UsageError(f"--quick: {already} imported before the tests started")
    sys.meta_path.insert(0, _RefuseLoopImports())


_SESSION = {}  # whole-suite wall time, for `python -m rig.bench` (see pytest_sessionfinish)
# `make test`'s selection (Makefile): the tests neither `make test-sandbox` nor `make test-long` runs
MAKE_TEST = "not sandbox and not long"


def pytest_sessionstart(session):
    import time

    _SESSION["start"] = time.perf_counter()


def pytest_sessionfinish(session, exitstatus):
    """After a whole-suite run (tests from `testpaths`, no -k, no -m but `make test`'s), keep its wall time."""
    import time
    from datetime import UTC, datetime

    config = session.config
    if hasattr(config, "workerinput"):  # an xdist worker: the controller records the whole session
        return
    whole = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    whole = whole and not config.option.keyword and config.option.markexpr in ("", MAKE_TEST)
    whole = whole and not config.option.collectonly  # a collection alone ran no test
    if not whole or getattr(config, "cache", None) is None or "start" not in _SESSION:
        return
    config.cache.set(
        "shardlab/wall_time",
        {
            "wall_s": round(time.perf_counter() - _SESSION["start"], 1),
            "finished_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "tests": session.testscollected,
            "failed": session.testsfailed,
            "exit_status": int(exitstatus),
            "selection": f"-m '{config.option.markexpr}'" if config.option.markexpr else "every test",
            "measured_by": "tests/conftest.py: pytest session start to finish (excludes make's venv check)",
        },
    )
