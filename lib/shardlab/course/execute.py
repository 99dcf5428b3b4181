"""Execute the stage notebooks with papermill, each in a fresh kernel, into an output folder.

The run happens in a staging folder inside OUT (`shardlab.outdir`); only a run in which
every notebook succeeded replaces the files of the previous run, so a failed run never
modifies earlier receipts, and a file a person put in OUT is never removed.
"""

import json
import os
import sys
import time
from pathlib import Path

import nbformat

from shardlab import outdir
from shardlab.core.config import add_run_arguments
from shardlab.course import catalog
from shardlab.course.catalog import KERNEL, NOTEBOOKS  # noqa: F401 (NOTEBOOKS: re-exported for callers)
from shardlab.errors import ConfigError, ImplementationError
from shardlab.evidence import stable
from shardlab.learner import implementation as learner_implementation

COMMAND = "run"  # this command's section of the output folder's manifest
FAILED = "run-failed"  # the section holding the partly executed notebook of a failed run
WALL_TIME = "wall_time.json"  # how long the run took (read by `python -m shardlab bench`)
BENCH_READER = "stage4_profile"  # the notebook that shows a bench.json, when --bench names one
CELL_TIMEOUT = 900  # seconds per cell; a timeout is a failure, never a silent pass
# The kernel talks to the runner over Unix sockets in Jupyter's runtime folder instead of TCP on
# loopback: nothing listens on a port, and ipykernel's "running over TCP without encryption"
# warning (true, and nothing a learner can act on) has no cause to print.
LOCAL_KERNEL = {"KernelManager": {"transport": "ipc"}}


class NotebookFailed(RuntimeError):
    """A notebook raised or timed out; the message names the notebook and the cell."""


def _failing_cell(executed: Path, source: Path) -> str:
    """Where the executed copy recorded an error, named as JupyterLab shows it: the cell's `[n]` prompt."""
    try:
        nb = nbformat.read(executed, as_version=4)
    except Exception:
        return "unknown cell"
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                tags = ", ".join(cell.get("metadata", {}).get("tags", [])) or "untagged"
                first = next((line for line in cell.get("source", "").splitlines() if line.strip()), "")
                return (
                    f"cell [{cell.get('execution_count')}] (tag {tags}; starts `{first.strip()[:60]}`): "
                    f"{output.get('ename')}: {output.get('evalue')}"
                )
    return "a cell with no error output (timeout or dead kernel)"


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


def execute(name: str, folder: Path, parameters: dict, timeout: int = CELL_TIMEOUT) -> Path:
    """Run the course notebook <name>.ipynb (package data) in a new kernel with cwd=folder; return the executed copy."""
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from traitlets.config import Config

    source = catalog.NOTEBOOK_DIR / f"{name}.ipynb"
    target = folder / f"{name}.ipynb"
    os.environ.pop("MPLBACKEND", None)  # kernels inherit it; Agg would hide inline figures
    try:
        papermill.execute_notebook(
            str(source),
            str(target),
            parameters=parameters,
            kernel_name=KERNEL,
            cwd=str(folder),
            execution_timeout=timeout,
            progress_bar=False,
            log_output=False,
            config=Config(LOCAL_KERNEL),
        )
    except (papermill.PapermillExecutionError, CellTimeoutError, DeadKernelError) as exc:
        raise NotebookFailed(f"{name}.ipynb failed at {_failing_cell(target, source)} [{type(exc).__name__}]") from exc
    nb = nbformat.read(target, as_version=4)
    if nb.metadata.get("papermill", {}).get("exception"):
        raise NotebookFailed(f"{name}.ipynb recorded an exception: {_failing_cell(target, source)}")
    return target


def export_html(executed: Path) -> Path:
    """Write an HTML copy next to the executed notebook that opens offline (see shardlab.evidence.pages)."""
    from shardlab.evidence.pages import export_html as export

    return export(executed)


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
    bench: str | None = None,
) -> Path:
    """Execute the notebooks into a staging folder and publish it as `out` on success."""
    from shardlab.core.config import Config

    Config(seed=seed, batch_size=batch_size)  # parameter errors before any kernel starts
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
        print(f"[shardlab] run: seed {seed}, batch size {batch_size}, implementation {implementation}", flush=True)
        for number, name in enumerate(names, start=1):
            print(f"[shardlab] {number}/{len(names)} {name}.ipynb ...", flush=True)
            clock = time.perf_counter()
            # relative to the kernel's folder, so no receipt names this machine's paths
            extra = (
                {"bench_json": os.path.relpath(Path(bench).resolve(), staging)}
                if bench and name == BENCH_READER
                else {}
            )
            try:
                executed = execute(name, staging, {**parameters, **extra}, timeout)
            except NotebookFailed as failed:
                partial = staging / f"{name}.ipynb"
                kept = _keep_partial(name, partial.read_bytes() if partial.is_file() else None, out)
                raise NotebookFailed(_failure_advice(str(failed), kept, implementation)) from failed
            stable.notebook(executed)
            if html:
                export_html(executed)
            print(f"[shardlab] {number}/{len(names)} {name}.ipynb done in {_elapsed(clock)}", flush=True)
        clock = time.perf_counter()
        for hook in _finishers():
            hook(staging)
        print(f"[shardlab] paths, audit, index and modes done in {_elapsed(clock)}", flush=True)
        _write_wall_time(staging, time.perf_counter() - started, names)
    return out


def _failure_advice(message: str, kept: Path | None, implementation: str) -> str:
    """The failure message plus where the partly executed notebook is and what to run next."""
    lines = [message]
    if kept is not None:
        lines.append(f"  the partly executed notebook, outputs up to the failing cell: {kept}")
    if implementation != "reference":
        lines.append(f"  then check your implementation stage by stage: make check IMPL={implementation} STAGE=1")
    return "\n".join(lines)


def _finishers():
    """Steps that run after every notebook succeeded: folder-relative paths, the audit, the index, the modes."""
    from shardlab.evidence.audit import write_audit
    from shardlab.evidence.index import write_index
    from shardlab.evidence.paths import relative_paths

    return [relative_paths, write_audit, write_index, stable.modes]


def _elapsed(since: float) -> str:
    """Seconds since `since` (a perf_counter reading), rounded for a person."""
    return f"{time.perf_counter() - since:.1f} s"


def _write_wall_time(staging: Path, seconds: float, names: list[str]) -> None:
    """Record this run's wall time in wall_time.json (`python -m shardlab bench` cites it)."""
    from datetime import UTC, datetime

    record = {
        "wall_s": round(seconds, 1),
        "finished_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "notebooks": list(names),
        "measured_by": "shardlab.course.execute.run: first notebook start to last finisher (excludes the venv check)",
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
    parser.add_argument("--bench", default=None, help="a bench.json from `make bench` for stage 4 to show (optional)")


def main(args) -> int:
    try:
        out = run(
            args.out, args.seed, args.batch_size, args.implementation, args.replace, args.notebooks, bench=args.bench
        )
    except (NotebookFailed, ConfigError) as exc:  # OutputFolderError is a ConfigError
        print(f"[shardlab] run failed: {exc}", file=sys.stderr)
        return 1
    print(summary(out))
    return 0
