"""Execute the stage notebooks with papermill, each in a fresh kernel, into an output folder.

The run happens in a staging folder inside OUT (`shardlab.outdir`); only a run in which
every notebook succeeded replaces the files of the previous run, so a failed run never
modifies earlier receipts, and a file a person put in OUT is never removed.
"""

import concurrent.futures
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

from shardlab import outdir
from shardlab.cli import add_run_arguments
from shardlab.course import catalog
from shardlab.course.catalog import KERNEL
from shardlab.errors import ConfigError, ImplementationError
from shardlab.evidence import stable
from shardlab.learner import implementation as learner_implementation

COMMAND = "run"  # this command's section of the output folder's manifest
FAILED = "run-failed"  # the section holding the partly executed notebook of a failed run
WALL_TIME = "wall_time.json"  # how long the run took (read by `python -m rig.bench`)
CELL_TIMEOUT = 900  # seconds per cell; a timeout is a failure, never a silent pass
# The kernel talks to the runner over Unix sockets in Jupyter's runtime folder instead of TCP on
# loopback: nothing listens on a port, and ipykernel's "running over TCP without encryption"
# warning (true, and nothing a learner can act on) has no cause to print.
LOCAL_KERNEL = {
    "KernelManager": {"transport": "ipc"},
    # shutdown without the SIGINT jupyter_client sends first (see shardlab.course.kernel_manager)
    "NotebookClient": {"kernel_manager_class": "shardlab.course.kernel_manager.FinishedKernelManager"},
}
# JAX's persistent compilation cache, shared by the kernels of one run (and the checker children their
# check cells start): a program one notebook compiled, a later one loads instead of compiling it again.
# It lives in the run's staging folder and is removed before the audit, so no receipt holds it and no
# later run reads it. A cached executable is the one XLA compiled for the same program and options, so
# results are the same; only the notebooks that measure compilation itself run without it. Stage 5's
# controller groups never inherit a kernel's cache (multi.launcher.environment): each drill series decides
# which of its groups compile themselves (the ones whose step times show compiling steps) and which share one.
COMPILATION_CACHE = ".jax-compilation-cache"
MEASURES_COMPILATION = ("stage4a_profile",)  # shows lower and compile times, measured here
CACHE_ENVIRONMENT = {  # jax.config options, read from the environment when a kernel's JAX starts
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",  # the course's programs compile in milliseconds
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
}


class NotebookFailed(RuntimeError):
    """A notebook raised or timed out; the message names the notebook and the cell."""


class _Pages:
    """The HTML pages of the notebooks in catalog.BESIDE_FIXTURES (and the other fixtures' pair), exported
    one at a time in a thread of their own while the kernels of both lanes run.

    None of those notebooks times anything; `drain` waits for every page handed in so far (and raises
    the first export's error) before the first notebook that does, so no export runs beside a timing.
    With `sheets` None (no HTML copies) it exports nothing.
    """

    def __init__(self, sheets: Path | None):
        self.sheets = sheets
        self._pool = None if sheets is None else concurrent.futures.ThreadPoolExecutor(1, "pages")
        self._pending = []
        self._lock = threading.Lock()  # both lanes hand in pages

    def submit(self, executed: Path) -> None:
        if self._pool is not None:
            with self._lock:
                self._pending.append(self._pool.submit(export_html, executed, self.sheets))

    def drain(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _cells(executed: Path) -> list:
    """The cells of the executed copy, or none if it is unreadable (a run stopped while writing it)."""
    import nbformat  # here, not at import: a command line refused before any notebook runs never loads it

    try:
        return nbformat.read(executed, as_version=4).cells
    except Exception:
        return []


def _error_output(cell) -> dict | None:
    """The cell's first error output, or None."""
    return next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"), None)


def _stopped_cell(executed: Path):
    """(cell, error name) where the executed copy stopped: the first cell with an error output and its error; else
    the last cell papermill started and None (a timeout or a dead kernel stopped it: papermill records a start time
    as it starts each cell, the cells after it stay pending); (None, None) if the copy is unreadable."""
    cells = _cells(executed)
    failed = next((c for c in cells if _error_output(c)), None)
    if failed is not None:
        return failed, _error_output(failed).get("ename")
    started = [c for c in cells if c.get("metadata", {}).get("papermill", {}).get("start_time")]
    return (started[-1] if started else None), None


def _failing_cell(executed: Path) -> str:
    """Where the executed copy stopped, named as JupyterLab shows it: the cell's `[n]` prompt, and its error."""
    cell, _ = _stopped_cell(executed)
    if cell is None:
        return "a cell with no error output (timeout, dead kernel or an unreadable notebook)"
    tags = ", ".join(cell.get("metadata", {}).get("tags", [])) or "untagged"
    first = next((line for line in cell.get("source", "").splitlines() if line.strip()), "")
    where = f"cell [{cell.get('execution_count')}] (tag {tags}; starts `{first.strip()[:60]}`)"
    output = _error_output(cell)
    if output is None:
        return f"{where}, which was running when the notebook stopped (no error output: a timeout or a dead kernel)"
    return f"{where}: {output.get('ename')}: {output.get('evalue')}"


def _keep_partial(name: str, notebook: bytes | None, out: Path) -> Path | None:
    """Publish a failed, partly executed notebook as OUT/failed/<name>.ipynb so the learner can open it.

    It is its own command's output (`run-failed` in OUT's manifest), so the earlier receipts
    stay as they were and the next run may replace it.
    """
    if notebook is None:
        return None
    try:
        with outdir.writing(out, FAILED) as staging:
            (staging / "failed").mkdir()
            (staging / "failed" / f"{name}.ipynb").write_bytes(notebook)
    except (OSError, ConfigError):  # keeping the copy is a courtesy; the failure itself is reported anyway
        return None
    return out / "failed" / f"{name}.ipynb"


def kernel_environment(cache: Path | None, reached: Path | None = None) -> dict:
    """The environment a kernel starts with: the runner's, with the run's compilation cache or without any.

    A kernel never inherits a cache folder from the shell (a receipt would then depend on an earlier
    run), nor MPLBACKEND (Agg would hide inline figures). With `reached`, the kernel (and the checker its
    check cells start) appends there the API functions it looks up on the implementation
    (learner.implementation.REACHED_ENV). The runner's own `os.environ` is never changed.
    """
    names = ("MPLBACKEND", "JAX_COMPILATION_CACHE_DIR", learner_implementation.REACHED_ENV, *CACHE_ENVIRONMENT)
    environment = {name: value for name, value in os.environ.items() if name not in names}
    if cache is not None:
        environment.update({"JAX_COMPILATION_CACHE_DIR": str(cache), **CACHE_ENVIRONMENT})
    if reached is not None:
        environment[learner_implementation.REACHED_ENV] = str(reached)
    return environment


def execute(
    name: str,
    folder: Path,
    parameters: dict,
    timeout: int = CELL_TIMEOUT,
    cache: Path | None = None,
    reached: Path | None = None,
) -> Path:
    """Run the course notebook <name>.ipynb (package data) in a new kernel with cwd=folder; return the executed copy.

    `cache` is a folder for JAX's persistent compilation cache shared with other kernels of the same
    run (None: no cache; the notebooks in MEASURES_COMPILATION never get one). `reached`: a file that
    gets the name of each API function the notebook looks up on the implementation (None: not recorded).
    """
    import nbformat  # here, like papermill: `python -m shardlab run` refuses a bad argument without loading them
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    source = catalog.NOTEBOOK_DIR / f"{name}.ipynb"
    target = folder / f"{name}.ipynb"
    environment = kernel_environment(None if name in MEASURES_COMPILATION else cache, reached)
    stops = (CellTimeoutError, DeadKernelError)
    parameters = declared(source, parameters)
    _papermill(papermill, name, source, target, folder, parameters, timeout, stops, environment)
    nb = nbformat.read(target, as_version=4)
    if nb.metadata.get("papermill", {}).get("exception"):
        raise NotebookFailed(f"{name}.ipynb recorded an exception: {_failing_cell(target)}")
    return target


def declared(source: Path, parameters: dict) -> dict:
    """The `parameters` that the notebook's parameters cell assigns: a notebook without a seed is given none, so its
    page does not show a value it never uses."""
    import ast

    import nbformat

    cells = nbformat.read(source, as_version=4).cells
    names = {
        target.id
        for cell in cells
        if "parameters" in cell.get("metadata", {}).get("tags", [])
        for node in ast.parse(cell.source).body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    return {name: value for name, value in parameters.items() if name in names}


def _papermill(papermill, name, source: Path, target: Path, folder: Path, parameters, timeout, stops, environment):
    from traitlets.config import Config

    kernel = {"environment": environment, "folder": str(folder)}  # never papermill's cwd=: it moves the whole process
    try:
        papermill.execute_notebook(
            str(source),
            str(target),
            parameters=parameters,
            kernel_name=KERNEL,
            execution_timeout=timeout,
            progress_bar=False,
            log_output=False,
            config=Config({**LOCAL_KERNEL, "FinishedKernelManager": kernel}),
        )
    except (papermill.PapermillExecutionError, *stops) as exc:
        raise NotebookFailed(f"{name}.ipynb failed at {_failing_cell(target)} [{type(exc).__name__}]") from exc


def export_html(executed: Path, sheets: Path) -> Path:
    """Write an HTML copy next to the executed notebook that opens offline, linking the stylesheet in `sheets`.

    Every page of a run, the other fixtures' pages too, links the one stylesheet at the top
    of the run's folder (see shardlab.evidence.pages).
    """
    from shardlab.evidence.pages import export_html as export

    return export(executed, sheets)


def notebook_names(names: list[str] | None) -> list[str]:
    """The notebooks to run, in order: names from `catalog.NOTEBOOKS` (never paths); all of them by default."""
    names = list(names or catalog.NOTEBOOKS)
    unknown = [name for name in names if name not in catalog.NOTEBOOKS]
    if unknown:
        raise ConfigError(f"no notebook named {unknown}; --notebooks takes names, not paths: {catalog.NOTEBOOKS}")
    return names


def run(
    out,
    seed: int,
    batch_size: int,
    implementation: str = "reference",
    replace: bool = False,
    notebooks: list[str] | None = None,
    timeout: int = CELL_TIMEOUT,
    html: bool = True,
    compilation_cache: bool | Path = True,
    reached: Path | None = None,
    workspace: str | None = None,
) -> Path:
    """Execute the notebooks into a staging folder and publish it as `out` on success.

    With `compilation_cache` the kernels share JAX's persistent compilation cache in the staging
    folder (COMPILATION_CACHE; removed before the audit); without it every kernel compiles alone.
    Given a folder instead, the kernels use that one and it is kept: runs of the same course share
    the programs they have in common (JAX keys an entry on the program, its options, the JAX version
    and the devices, so a hit gives the executable a compile would; only the time changes).
    With `reached` (an empty folder outside `out`), each notebook's kernel writes the API functions it
    looked up on the implementation, its check cells' checks included, to `reached/<name>.txt`
    (the other fixtures' notebooks to `reached/<fixture>/<name>.txt`).
    The run's own portfolio reads the learner's answers from `workspace`, as `make portfolio` does.
    """
    from shardlab.core.config import Config

    Config(seed=seed, batch_size=batch_size)  # parameter errors before any kernel starts
    _without_iri_grammars()
    names = notebook_names(notebooks)
    out = outdir.claim(out, COMMAND, replace)  # a symlinked or foreign OUT is refused, never followed
    if implementation != "reference":
        try:
            implementation = str(Path(learner_implementation.check_path(implementation)).resolve())
        except ImplementationError as exc:
            raise ConfigError(str(exc)) from None
    parameters = {"seed": seed, "batch_size": batch_size, "out_dir": ".", "implementation": implementation}
    started = time.perf_counter()
    with outdir.writing(out, COMMAND, replace) as staging:
        sheets = staging if html else None  # where every page's one stylesheet goes (None: no HTML copies)
        own = compilation_cache is True  # a cache of this run's alone, removed before the audit
        cache = staging / COMPILATION_CACHE if own else (Path(compilation_cache) if compilation_cache else None)
        print(f"[shardlab] run: seed {seed}, batch size {batch_size}, implementation {implementation}", flush=True)
        fixtures = _other_fixtures(seed, batch_size, names)
        second = [name for name in names if name in catalog.SECOND_LANE]  # course notebooks the second lane runs
        stop = threading.Event()  # set once the course's lane has ended: the fixtures' lane starts no more notebooks
        pages = _Pages(sheets)  # the untimed notebooks' pages, exported beside the kernels
        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="fixtures") as beside:
                lane = beside.submit(
                    _fixture_lane,
                    fixtures,
                    staging,
                    parameters,
                    out,
                    implementation,
                    timeout,
                    _part(cache, "fixtures"),
                    stop,
                    reached,
                    second,
                    pages,
                )
                try:
                    args = (
                        staging,
                        parameters,
                        out,
                        implementation,
                        timeout,
                        sheets,
                        _part(cache, "course"),
                        reached,
                    )
                    course = [name for name in names if name not in second]
                    seconds = _course_lane(course, lane, pages, *args)  # each notebook's wall time (see _course_lane)
                    seconds.update(lane.result())
                    pages.drain()
                finally:
                    stop.set()
        finally:
            pages.close()  # after both lanes: neither hands in another page
        if own:  # this run's alone: never a receipt, never read by another run
            shutil.rmtree(cache, ignore_errors=True)
        clock = time.perf_counter()
        started_check = _StartedCheck.begin(out, staging, implementation, names)
        try:
            for hook in _finishers(workspace, started_check):
                hook(staging)
        finally:
            if started_check is not None:
                started_check.close()
        print(f"[shardlab] paths, audit, index and modes done in {_elapsed(clock)}", flush=True)
        _write_wall_time(staging, time.perf_counter() - started, names, seconds)
    return out


UNUSED_AT_IMPORT = "rfc3987_syntax"  # jsonschema's optional IRI checker: builds its grammars when imported


def _without_iri_grammars() -> None:
    """Keep jsonschema from loading rfc3987_syntax in this process (the runner), before nbformat is first imported.

    nbformat, papermill and nbconvert import jsonschema, whose format module imports rfc3987_syntax if it
    is installed; that import builds its IRI grammars, about 1.7 of the 1.9 CPU-seconds nbformat's import
    costs, before the first kernel of the run can start. None of them checks a string format (they pass
    jsonschema no format checker), so the "iri" checks it would register are never used here. A None
    entry in sys.modules makes that optional import fail as if the package were absent; jsonschema
    carries on without it. Nothing changes once jsonschema is already imported.
    """
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault(UNUSED_AT_IMPORT, None)


def _file(reached: Path | None, name: str) -> Path | None:
    """Where notebook `name` records the functions it reaches (the folder made), or None when nothing is recorded."""
    if reached is None:
        return None
    reached.mkdir(parents=True, exist_ok=True)
    return reached / f"{name}.txt"


def _part(cache: Path | None, lane: str) -> Path | None:
    """The compilation cache of one lane of a run (the course's kernels share one, the fixtures' another)."""
    return cache / lane if cache is not None else None


def _course_lane(names, lane, pages, staging, parameters, out, implementation, timeout, sheets, cache, reached) -> dict:
    """Execute `names` in order; wait for the fixtures' `lane` and every page handed to `pages` before the first
    notebook that times anything. Returns each notebook's seconds: a notebook that times something exports its
    page here, after its kernel ended, and its seconds include it; the others' pages go to `pages`."""
    seconds = {}
    for number, name in enumerate(names, start=1):
        untimed = name in catalog.BESIDE_FIXTURES
        if not untimed or lane.done():
            lane.result()  # a failed fixture fails the run here; a finished one returns at once
        if not untimed:
            pages.drain()  # no page export runs beside a notebook that times something
        label = f"{number}/{len(names)} {name}.ipynb"
        clock = time.perf_counter()
        executed = _execute_one(
            name,
            staging,
            parameters,
            out,
            implementation,
            timeout,
            None if untimed else sheets,
            label,
            cache,
            _file(reached, name),
        )
        seconds[name] = round(time.perf_counter() - clock, 2)
        if untimed:
            pages.submit(executed)
    return seconds


def _fixture_lane(
    fixtures, staging, parameters, out, implementation, timeout, cache, stop, reached=None, course=(), pages=None
) -> dict:
    """Run `course` (notebooks of catalog.SECOND_LANE, into the run's folder), then the resume pair for every
    other fixture into fixtures/<fixture>/, beside the course's first notebooks.

    Runs in a thread of its own while the other notebooks in catalog.BESIDE_FIXTURES run in the main one
    (none of them times anything); its kernels have a compilation cache of their own. Returns each
    notebook's seconds (without its page, which goes to `pages`, a _Pages, when given). Stops before its
    next notebook once `stop` is set (the run failed or was interrupted).
    """
    seconds = {}
    for name in course:
        if stop.is_set():
            return seconds
        clock = time.perf_counter()
        label = f"beside: {name}.ipynb"
        executed = _execute_one(
            name, staging, parameters, out, implementation, timeout, None, label, cache, _file(reached, name)
        )
        seconds[name] = round(time.perf_counter() - clock, 2)
        if pages is not None:
            pages.submit(executed)
    for fixture, (other_seed, other_batch) in fixtures.items():
        folder = staging / catalog.FIXTURE_DIR / fixture
        folder.mkdir(parents=True)
        for name in catalog.FRESH_KERNEL_PAIR:
            if stop.is_set():
                return seconds
            fixed = {**parameters, "seed": other_seed, "batch_size": other_batch}
            label = f"{fixture}: {name}.ipynb"
            clock = time.perf_counter()
            where = _file(reached / fixture if reached is not None else None, name)
            executed = _execute_one(name, folder, fixed, out, implementation, timeout, None, label, cache, where)
            seconds[f"{fixture}/{name}"] = round(time.perf_counter() - clock, 2)
            if pages is not None:
                pages.submit(executed)
    return seconds


def _other_fixtures(seed: int, batch_size: int, names: list[str]) -> dict:
    """The course fixtures (core.config.FIXTURES) other than this run's, when this run executes the resume pair."""
    from shardlab.core.config import FIXTURES

    if not set(catalog.FRESH_KERNEL_PAIR) <= set(names):
        return {}
    return {name: pair for name, pair in FIXTURES.items() if pair != (seed, batch_size)}


def _execute_one(
    name, folder: Path, parameters: dict, out, implementation, timeout, sheets, label, cache=None, reached=None
):
    """Execute one notebook into `folder` in a fresh kernel, stabilise and export it; keep a failure's partial copy."""
    print(f"[shardlab] {label} ...", flush=True)
    clock = time.perf_counter()
    try:
        executed = execute(name, folder, parameters, timeout, cache, reached)
    except NotebookFailed as failed:
        partial = folder / f"{name}.ipynb"
        kept = _keep_partial(name, partial.read_bytes() if partial.is_file() else None, out)
        cell, error = _stopped_cell(partial) if partial.is_file() else (None, None)
        tags = cell.get("metadata", {}).get("tags", []) if cell is not None else None  # None: no cell to name
        advice = _failure_advice(str(failed), kept, implementation, name, tags, error)
        raise NotebookFailed(advice) from failed
    stable.notebook(executed)
    if sheets is not None:
        export_html(executed, sheets)
    print(f"[shardlab] {label} done in {_elapsed(clock)}", flush=True)
    return executed


LOAD_FAILED = "ImplementationError"  # what `implementation.load` raises in a setup cell for a file that cannot load
GAP = (
    "if every check passes, the notebook asks more than the checker does: that is a gap in the course, not in your file"
)


def _failure_advice(message: str, kept: Path | None, implementation: str, name: str = "", tags=(), error=None) -> str:
    """The failure message, where the partly executed notebook is, and the check covering the failing cell.

    The checks come from the table of what each notebook cell asserts about the implementation
    (shardlab.checker.course_cells.COVERAGE); a cell no check covers is said to be the course's gap.
    `error` is the error name the cell recorded (None after a timeout or a dead kernel).
    """
    lines = [message]
    if kept is not None:
        lines.append(f"  the partly executed notebook, outputs up to the failing cell: {kept}")
    if implementation != "reference":
        lines += _advice(implementation, name, None if tags is None else list(tags), error)
    return "\n".join(lines)


def _advice(implementation: str, name: str, tags: list | None, error) -> list[str]:
    """Where to look next: the checks covering the cell, the check that fails to load the file, or the course's gap."""
    from shardlab.checker.course_cells import ALL, covering

    if error == LOAD_FAILED:
        return [
            "  your file did not load (the message above says where); the checker stops at the same point, "
            "its implementation_loads check fails:",
            f"    make check IMPL={implementation} STAGE=1",
        ]
    if tags is None:
        return [
            "  the notebook stopped before any cell could be named (a timeout, a dead kernel or an unreadable copy); "
            "the checker's per-call time and memory bounds name a function that hangs or crashes:",
            f"    make check IMPL={implementation} STAGE=all",
            f"  {GAP}",
        ]
    found = covering(name, tags)
    if not found:
        return [
            f"  no check covers this cell ({name}, tag {', '.join(tags) or 'none'}): it asserts nothing the "
            "checker would ask of your file, so this is a gap in the course, not in your file; "
            f"make check IMPL={implementation} STAGE=all tells whether your file has a fault of its own"
        ]
    stage = max(s for _, s in found)
    if found[0][0] == ALL:
        head = f"  this cell ran stage {stage}'s checks; its FAIL lines (in that notebook) name the failing one:"
    else:
        names = ", ".join(f"{check} (stage {s})" for check, s in found)
        head = f"  what this cell asserts about your file is what these checks test: {names}:"
    return [head, f"    make check IMPL={implementation} STAGE={stage}", f"  {GAP}"]


class _StartedCheck:
    """The portfolio's check of the stages no notebook of the run checked (stage 4 in a whole run), started in a
    child interpreter as soon as every kernel has ended, so it runs beside the run's own last steps in this
    process (the relative paths, the audit) instead of after them.

    It works in a folder of its own in OUT beside the staging folder (named like one, so the next run
    removes a killed run's copy) and removed with `close`. The portfolio takes its outcome only when it
    asks for the same implementation and stages (`portfolio.checker_report`); otherwise it checks itself.
    """

    def __init__(self, out: Path, implementation: str, stages: list[int]):
        from shardlab.core import files
        from shardlab.handin import portfolio

        self.key = (implementation, list(stages))
        self.folder = Path(files.temporary_dir(out, prefix=outdir.STAGING))
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "check")
        self._outcome = self._pool.submit(portfolio.bounded_check, implementation, self.folder / "check", stages)

    @classmethod
    def begin(cls, out: Path, staging: Path, implementation: str, names: list[str]):
        """Start the check for a run of every notebook whose notebooks left a stage unchecked; else None."""
        from shardlab.course import results as record
        from shardlab.handin import portfolio

        if set(names) != set(catalog.NOTEBOOKS) or portfolio.left_out(staging):  # no portfolio, so no check
            return None
        found = {p.stem: record.load(staging, p.stem) for p in sorted((staging / record.RESULTS).glob("*.json"))}
        stages = portfolio.stages_left({"results": found})
        return cls(out, implementation, stages) if stages else None

    def __call__(self, implementation: str, stages: list[int]):
        """The started check's outcome if it is the one asked for, else None."""
        return self._outcome.result() if (implementation, list(stages)) == self.key else None

    def close(self) -> None:
        """Wait for the check (it ends within its own bound) and remove its folder."""
        self._pool.shutdown(wait=True)
        shutil.rmtree(self.folder, ignore_errors=True)


def _finishers(workspace: str | None = None, started=None):
    """Steps that run after every notebook succeeded: relative paths, the audit, the portfolio, the index, the modes.

    `started`: the portfolio's check, already running (`_StartedCheck`), or None (the portfolio checks itself)."""
    from functools import partial

    from shardlab.evidence.audit import write_audit
    from shardlab.evidence.index import write_index
    from shardlab.evidence.paths import relative_paths
    from shardlab.handin.portfolio import finish_run  # the run's own portfolio, from the audit just written

    return [
        relative_paths,
        write_audit,
        partial(finish_run, workspace=workspace, started=started),
        write_index,
        stable.modes,
    ]


def _elapsed(since: float) -> str:
    """Seconds since `since` (a perf_counter reading), rounded for a person."""
    return f"{time.perf_counter() - since:.1f} s"


def _write_wall_time(staging: Path, seconds: float, names: list[str], per_notebook: dict | None = None) -> None:
    """Record this run's wall time, and each notebook's, in wall_time.json (`python -m rig.bench` cites it)."""
    from datetime import UTC, datetime

    record = {
        "wall_s": round(seconds, 1),
        "finished_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "notebooks": list(names),
        "notebook_s": dict(per_notebook or {}),
        "measured_by": (
            "shardlab.course.execute.run: first notebook start to last finisher (excludes the venv check); "
            "the notebooks in catalog.BESIDE_FIXTURES ran beside the other fixtures' resume pair; a notebook's "
            "seconds include its HTML page only if it times something (the others' pages are exported in a "
            "thread of their own before the first of those starts)"
        ),
    }
    (staging / WALL_TIME).write_text(json.dumps(record, indent=1) + "\n")


def summary(out: Path) -> str:
    """Where the evidence is, what this run used, and what it observed (from its audit.json)."""
    from shardlab.evidence.headline import lines
    from shardlab.evidence.index import INDEX

    lines_out = [f"[shardlab] evidence in {out}"]
    if (out / INDEX).is_file():
        lines_out.append(f"  open {out / INDEX} in a browser (works offline)")
    audit = out / "audit.json"
    if audit.is_file():
        lines_out += [f"  {line}" for line in lines(json.loads(audit.read_text()))]
    return "\n".join(lines_out)


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="receipts", help="output folder (default: receipts)")
    add_run_arguments(parser)
    parser.add_argument("--implementation", default="reference", help="'reference' or a learner's .py file")
    parser.add_argument("--replace", action="store_true", help="replace a previous run in --out (only on success)")
    parser.add_argument("--notebooks", nargs="*", default=None, help="subset of notebook names, in order")
    parser.add_argument(
        "--workspace", default=None, help="your notebook copies (make lab's workspace/): the run's portfolio reads them"
    )


def main(args) -> int:
    try:
        out = run(
            args.out,
            args.seed,
            args.batch_size,
            args.implementation,
            args.replace,
            args.notebooks,
            workspace=args.workspace,
        )
    except (NotebookFailed, ConfigError) as exc:  # OutputFolderError is a ConfigError
        print(f"[shardlab] run failed: {exc}", file=sys.stderr)
        return 1
    print(summary(out))
    return 0
