"""Execute the stage notebooks with papermill, each in a fresh kernel, into an output folder.

The run happens in a staging folder beside OUT; only a run in which every notebook
succeeded replaces OUT, so a failed run never modifies earlier receipts.
"""

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from shardlab.core.errors import ConfigError, ImplementationError
from shardlab.course import catalog
from shardlab.course.catalog import KERNEL, NOTEBOOKS
from shardlab.learner import implementation as learner_implementation

MARKER = ".shardlab-receipts"  # present in every folder this runner wrote
WALL_TIME = "wall_time.json"  # how long the run took (read by `python -m shardlab bench`)
BENCH_READER = "stage4_profile"  # the notebook that shows a bench.json, when --bench names one
CELL_TIMEOUT = 900  # seconds per cell; a timeout is a failure, never a silent pass


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


def _keep_partial(executed: Path, out: Path) -> Path | None:
    """Copy a failed, partly executed notebook to OUT/failed/ so the learner can open it; return its path."""
    if not executed.is_file():
        return None
    if not out.exists():
        out.mkdir(parents=True)
        (out / MARKER).write_text("written by `python -m shardlab run`; replaced whole by the next run\n")
    kept = out / "failed" / executed.name
    kept.parent.mkdir(exist_ok=True)
    shutil.copyfile(executed, kept)
    return kept


def execute(name: str, folder: Path, parameters: dict, timeout: int = CELL_TIMEOUT) -> Path:
    """Run notebooks/<name>.ipynb in a new kernel with cwd=folder; return the executed copy."""
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

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
        )
    except (papermill.PapermillExecutionError, CellTimeoutError, DeadKernelError) as exc:
        raise NotebookFailed(f"{name}.ipynb failed at {_failing_cell(target, source)} [{type(exc).__name__}]") from exc
    nb = nbformat.read(target, as_version=4)
    if nb.metadata.get("papermill", {}).get("exception"):
        raise NotebookFailed(f"{name}.ipynb recorded an exception: {_failing_cell(target, source)}")
    return target


def export_html(executed: Path) -> Path:
    """Write an HTML copy next to the executed notebook, readable without Jupyter.

    nbconvert embeds the same ~260 kB of CSS in every page; it is moved to one
    content-addressed stylesheet beside the pages, which all of them link.
    """
    import hashlib
    import re

    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_filename(str(executed))
    styles = re.findall(r"<style[^>]*>.*?</style>", body, flags=re.S)
    css = "\n".join(re.sub(r"^<style[^>]*>|</style>$", "", block) for block in styles)
    sheet = executed.with_name(f"notebook-{hashlib.sha256(css.encode()).hexdigest()[:12]}.css")
    if not sheet.exists():
        sheet.write_text(css, encoding="utf-8")
    for index, block in enumerate(styles):
        body = body.replace(block, f'<link rel="stylesheet" href="{sheet.name}">' if index == 0 else "", 1)
    html = executed.with_suffix(".html")
    html.write_text(body, encoding="utf-8")
    return html


def check_out(out: Path, replace: bool) -> None:
    """Refuse an output folder we did not write, or any existing one without --replace."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ConfigError(f"output path {out} exists and is not a folder; choose another OUT")
    if out.is_dir() and any(out.iterdir()):
        if not (out / MARKER).exists():
            raise ConfigError(f"{out} holds files that no shardlab run wrote; choose an empty or new OUT")
        if not replace:
            raise ConfigError(f"{out} holds a previous run; pass --replace (make run does) or choose a new OUT")


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
    unknown = [name for name in notebooks or NOTEBOOKS if not (catalog.NOTEBOOK_DIR / f"{name}.ipynb").is_file()]
    if unknown:
        raise ConfigError(f"no notebook named {unknown} in {catalog.NOTEBOOK_DIR}; choose from {NOTEBOOKS}")
    out = Path(out).absolute()
    check_out(out, replace)  # before resolving, so a symlinked OUT is refused, never followed
    out = out.resolve()
    if implementation != "reference":
        try:
            implementation = str(Path(learner_implementation.check_path(implementation)).resolve())
        except ImplementationError as exc:
            raise ConfigError(str(exc)) from None
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.staging-", dir=out.parent))
    parameters = {"seed": seed, "batch_size": batch_size, "out_dir": ".", "implementation": implementation}
    started = time.perf_counter()
    try:
        for name in notebooks or NOTEBOOKS:
            print(f"[shardlab] executing {name}.ipynb ...", flush=True)
            extra = {"bench_json": str(Path(bench).resolve())} if bench and name == BENCH_READER else {}
            try:
                executed = execute(name, staging, {**parameters, **extra}, timeout)
            except NotebookFailed as failed:
                kept = _keep_partial(staging / f"{name}.ipynb", out)
                raise NotebookFailed(_failure_advice(str(failed), kept, implementation)) from failed
            if html:
                export_html(executed)
        for hook in _finishers():
            hook(staging)
        _write_wall_time(staging, time.perf_counter() - started, notebooks or NOTEBOOKS)
        (staging / MARKER).write_text("written by `python -m shardlab run`; replaced whole by the next run\n")
        _publish(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
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
    """Steps that run after every notebook succeeded: folder-relative paths, then the audit of all results."""
    from shardlab.evidence.report import relative_paths, write_audit

    return [relative_paths, write_audit]


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


def _publish(staging: Path, out: Path) -> None:
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.rename(out, old)
    os.rename(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def summary(out: Path) -> str:
    """A few lines on where the evidence is."""
    import json

    from shardlab.evidence.report import headline

    top = sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir() if p.name != MARKER)
    lines = [f"[shardlab] evidence in {out}:", "  " + "  ".join(top)]
    audit = out / "audit.json"
    if audit.is_file():
        lines += [f"  {line}" for line in headline(json.loads(audit.read_text()))]
    return "\n".join(lines)


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="receipts", help="output folder (default: receipts)")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--batch-size", type=int, default=7)
    parser.add_argument("--implementation", default="reference", help="'reference' or a learner's .py file")
    parser.add_argument("--replace", action="store_true", help="replace a previous run in --out (only on success)")
    parser.add_argument("--notebooks", nargs="*", default=None, help="subset of notebook names, in order")
    parser.add_argument("--bench", default=None, help="a bench.json from `make bench` for stage 4 to show (optional)")


def main(args) -> int:
    try:
        out = run(
            args.out, args.seed, args.batch_size, args.implementation, args.replace, args.notebooks, bench=args.bench
        )
    except (NotebookFailed, ConfigError) as exc:
        print(f"[shardlab] run failed: {exc}", file=sys.stderr)
        return 1
    print(summary(out))
    return 0
