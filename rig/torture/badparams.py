"""Bad parameters: each call must raise its specific error and leave everything written before unchanged.

Covers the library (batch size, data, device count, save and restore arguments), the
papermill runner (bad arguments, foreign or previous output folders, a failing run)
and, when present, the checker. "Unchanged" is checked by hashing the watched folders
(and the caller's state) before and after every call.
"""

import importlib.util
import io
import os
import time
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np

import shardlab as sl
from rig.torture.outcome import Tally, receipts_digest, same_state, tree_digest
from shardlab import outdir
from shardlab.core import checkpoint
from shardlab.course import catalog
from shardlab.course import execute as runner
from shardlab.errors import (
    CheckpointExistsError,
    ConfigError,
    ContractMismatchError,
    CorruptCheckpointError,
    DataError,
    DeviceSetupError,
    EmptyBatchError,
)

COURSE_DIR, COURSE_NOTEBOOKS = catalog.NOTEBOOK_DIR, list(catalog.NOTEBOOKS)  # before any test points elsewhere


def _nan(data):
    features = data.features.copy()
    features[3, 2] = np.nan
    return sl.Dataset(features, data.targets)


def _inf_targets(data):
    targets = data.targets.copy()
    targets[0] = np.inf
    return sl.Dataset(data.features, targets)


def library_cases(data, config, contract, state, accepted: str, folder: str, mesh) -> list[tuple]:
    """(name, call, expected error types) for the library; `accepted` is a checkpoint that must survive."""
    empty = sl.Dataset(np.zeros((0, 8), np.float32), np.zeros(0, np.float32))
    no_features = sl.Dataset(np.zeros((23, 0), np.float32), data.targets)
    short_targets = sl.Dataset(data.features, data.targets[:-1])
    step = sl.make_step(mesh)
    fresh = os.path.join(folder, "never-written.npz")
    nan_state = {**state, "weights": np.full(8, np.nan, np.float32)}
    no_momentum = {k: v for k, v in state.items() if k != "momentum"}
    three_devices = sl.contract(data, sl.Config(seed=config.seed, batch_size=config.batch_size, num_devices=3))
    cases = [
        (f"Config(batch_size={b!r})", lambda b=b: sl.Config(batch_size=b), ConfigError) for b in (0, -7, True, 2.5)
    ]
    cases += [(f"Config(num_devices={n!r})", lambda n=n: sl.Config(num_devices=n), ConfigError) for n in (0, -4, 2.0)]
    cases += [
        ("Config(seed=-1)", lambda: sl.Config(seed=-1), ConfigError),
        ("Config(learning_rate=nan)", lambda: sl.Config(learning_rate=float("nan")), ConfigError),
        ("Config(decay=1.0)", lambda: sl.Config(decay=1.0), ConfigError),
        ("next_batch(batch_size=0)", lambda: sl.next_batch(state, data, 0, mesh), ConfigError),
        ("next_batch(batch_size=-3)", lambda: sl.next_batch(state, data, -3, mesh), ConfigError),
        ("transition(batch_size=0)", lambda: sl.transition(state, data, 0, step, mesh), ConfigError),
        ("pad(no ids)", lambda: sl.pad(data, np.zeros(0, np.int32), 4), EmptyBatchError),
        ("initial(empty dataset)", lambda: sl.initial(17, empty, mesh), DataError),
        ("contract(empty dataset)", lambda: sl.contract(empty, config), DataError),
        ("contract(zero features)", lambda: sl.contract(no_features, config), DataError),
        ("contract(NaN in features)", lambda: sl.contract(_nan(data), config), DataError),
        ("initial(NaN in features)", lambda: sl.initial(17, _nan(data), mesh), DataError),
        ("initial(inf in targets)", lambda: sl.initial(17, _inf_targets(data), mesh), DataError),
        ("contract(rows != targets)", lambda: sl.contract(short_targets, config), DataError),
        ("make_mesh(0)", lambda: sl.make_mesh(0), DeviceSetupError),
        ("make_mesh(5) with 4 devices", lambda: sl.make_mesh(5), DeviceSetupError),
        ("setup_devices(3) after 4", lambda: sl.setup_devices(3), DeviceSetupError),
        ("setup_devices(0)", lambda: sl.setup_devices(0), DeviceSetupError),
        (
            "restore(contract of 3 devices) on 4",
            lambda: sl.restore(accepted, three_devices, mesh),
            ContractMismatchError,
        ),
        (
            "restore(4-device contract) on a 3-device mesh",
            lambda: sl.restore(accepted, contract, sl.make_mesh(3)),
            ContractMismatchError,
        ),
        (
            "restore(batch_size 8 contract)",
            lambda: sl.restore(accepted, {**contract, "batch_size": 8}, mesh),
            ContractMismatchError,
        ),
        ("restore(missing path)", lambda: sl.restore(fresh, contract, mesh), CorruptCheckpointError),
        ("save(existing path)", lambda: sl.save(accepted, state, contract), CheckpointExistsError),
        ("save(state without momentum)", lambda: sl.save(fresh, no_momentum, contract), CorruptCheckpointError),
        ("save(NaN weights)", lambda: sl.save(fresh, nan_state, contract), CorruptCheckpointError),
        (
            "save(order of another dataset size)",
            lambda: sl.save(fresh, {**state, "order": np.arange(5, dtype=np.int32)}, contract),
            CorruptCheckpointError,
        ),
    ]
    return cases


def _notebook(folder: Path, name: str, code: str) -> None:
    """A tiny notebook with a parameters cell, for runner failures that cost one kernel start."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    params = new_code_cell(
        "seed = 17  # seed\nbatch_size = 7  # rows\nout_dir = '.'  # out\nimplementation = 'reference'  # impl"
    )
    params.metadata["tags"] = ["parameters"]
    nb = new_notebook(cells=[params, new_code_cell(code)])
    nb.metadata["kernelspec"] = {"name": runner.KERNEL, "display_name": "Python (shardlab)", "language": "python"}
    nbformat.write(nb, folder / f"{name}.ipynb")


@contextmanager
def notebook_dir(folder: Path):
    """Point the runner at `folder` and its notebooks for the duration (restored afterwards)."""
    saved = catalog.NOTEBOOK_DIR, catalog.NOTEBOOKS
    catalog.NOTEBOOK_DIR = folder
    catalog.NOTEBOOKS = sorted(p.stem for p in folder.glob("*.ipynb")) or list(saved[1])
    try:
        yield
    finally:
        catalog.NOTEBOOK_DIR, catalog.NOTEBOOKS = saved


def previous_run(folder: Path) -> Path:
    """A folder the runner treats as its own earlier run: a receipt published under the output-folder policy."""
    with outdir.writing(folder, runner.COMMAND) as staging:
        (staging / "stage1_batches.ipynb").write_text('{"cells": []}\n')
        (staging / "results").mkdir()
        (staging / "results" / "stage1_batches.json").write_text('{"coverage": true}\n')
    return folder


def runner_cases(root: Path, full: bool) -> list[tuple]:
    """(name, call, expected error types) for the papermill runner and its command line."""
    previous = previous_run(root / "previous")
    foreign = root / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("a learner's notes\n")
    a_file = root / "a_file.txt"
    a_file.write_text("not a folder\n")
    link = root / "link_to_foreign"
    link.symlink_to(foreign)
    broken = root / "broken_impl.py"
    broken.write_text("def initial(*args):\n    raise RuntimeError('deliberately broken')\n")

    def run(out, **kw):
        return lambda: runner.run(out, **{"seed": 17, "batch_size": 7, "html": False, "notebooks": ["ok"], **kw})

    cases = [
        ("run(batch_size=0) over a previous run", run(previous, batch_size=0, replace=True), ConfigError),
        ("run(batch_size=-7) into a new folder", run(root / "new1", batch_size=-7), ConfigError),
        ("run(seed=-1) over a previous run", run(previous, seed=-1, replace=True), ConfigError),
        ("run into a previous run without --replace", run(previous), ConfigError),
        ("run into a folder it did not write", run(foreign, replace=True), ConfigError),
        ("run into a regular file", run(a_file, replace=True), ConfigError),
        ("run into a symlink to a folder it did not write", run(link, replace=True), ConfigError),
        (
            "run(implementation=missing file)",
            run(previous, implementation=str(root / "nope.py"), replace=True),
            ConfigError,
        ),
        (
            "run with a raising notebook over a previous run",
            run(previous, notebooks=["raises"], replace=True),
            runner.NotebookFailed,
        ),
        (
            "run with an unknown notebook over a previous run",
            run(previous, notebooks=["no_such_notebook"], replace=True),
            (ConfigError, FileNotFoundError),
        ),
        (
            "run with a notebook path instead of a name",
            run(previous, notebooks=["../notebooks/ok"], replace=True),
            ConfigError,
        ),
    ]
    cli = ["run", "--out", str(previous), "--replace", "--notebooks", "ok"]
    cases.append(
        ("CLI run --batch-size 0 over a previous run", lambda: _cli(cli + ["--batch-size", "0"]), CommandFailed)
    )
    if full:
        real = COURSE_NOTEBOOKS[:1]
        cases.append(
            (
                f"real notebook {real[0]} with a broken implementation over a previous run",
                lambda: _real(previous, broken, real),
                runner.NotebookFailed,
            )
        )
    return cases


def checker_cases(root: Path, full: bool) -> list[tuple]:
    """(name, call, expected error types) for `python -m shardlab check` ([] if the checker is absent)."""
    if importlib.util.find_spec("shardlab.checker.cli") is None:
        return []
    out = root / "check_out"
    out.mkdir()
    (out / "check_report.json").write_text('{"passed": true, "note": "an earlier report"}\n')
    empty = root / "empty_impl.py"
    empty.write_text("# a learner file that defines nothing yet\n")
    check = ["check", "--output", str(out)]
    cases = [
        (
            "check --implementation missing file",
            lambda: _cli(check + ["--implementation", str(root / "no.py")]),
            CommandFailed,
        ),
    ]
    if full:
        cases += [
            ("check --stage 0", lambda: _cli(check + ["--stage", "0"]), CommandFailed),
            ("check --stage 7", lambda: _cli(check + ["--stage", "7"]), CommandFailed),
            (
                "check --implementation (file defining nothing), no --output",
                lambda: _cli(check[:1] + ["--implementation", str(empty)]),
                CommandFailed,
            ),
        ]
    return cases


class CommandFailed(Exception):
    """A command exited non-zero (the expected outcome of a bad command line)."""


def _cli(argv: list[str]) -> None:
    """Run `python -m shardlab ARGV` in this interpreter; a non-zero exit raises CommandFailed with its last line.

    An exception escaping the command (what a user would see as a traceback) propagates
    and counts as unexpected.
    """
    from shardlab.__main__ import main

    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as exc:  # only --help ends this way; a bad command line returns 2
            code = exc.code
    if code:
        said = (err.getvalue().strip() or out.getvalue().strip()).splitlines() or [f"exit code {code}"]
        raise CommandFailed(said[-1][-300:])


def _real(previous: Path, implementation: Path, notebooks: list[str]):
    with notebook_dir(COURSE_DIR):
        return runner.run(previous, 17, 7, str(implementation), replace=True, notebooks=notebooks, html=False)


def probe(
    tally: Tally, name: str, call, expected, watched: list, state_before=None, state=None, digest=tree_digest
) -> dict:
    """Run one bad call; count refused / wrong accept / unexpected, and any change to watched paths."""
    before = [digest(w) for w in watched]
    started = time.perf_counter()
    tally.trials += 1
    try:
        call()
    except expected as exc:
        tally.errors[type(exc).__name__] += 1
        outcome, message = "refused", (str(exc).strip().splitlines() or [""])[0][:200]
    except Exception as exc:
        tally.errors[type(exc).__name__] += 1
        outcome, message = "unexpected", f"{name}: {type(exc).__name__}: {exc}"[:300]
    else:
        outcome, message = "wrong", f"{name}: accepted without an error"
    tally.count(outcome, message)
    changed = [os.fspath(w) for w, b in zip(watched, before) if digest(w) != b]
    if state is not None and not same_state(state, state_before):
        changed.append("the caller's state")
    if changed:
        tally.count("lost", f"{name}: modified {changed}")
    seconds = round(time.perf_counter() - started, 2)
    return {"case": name, "outcome": outcome, "message": message, "modified": changed, "seconds": seconds}


def run(folder, data, config, contract, state: dict, mesh, full: bool) -> dict:
    """Every bad-parameter case; return counts and one line per case."""
    started = time.perf_counter()
    folder = Path(folder)
    (folder / "library").mkdir(parents=True)
    accepted = checkpoint.save(folder / "library" / "accepted.npz", state, contract)
    tally, lines = Tally(), []
    snapshot = {k: np.copy(v) if isinstance(v, np.ndarray) else v for k, v in sl.host_copy(state).items()}
    for name, call, expected in library_cases(data, config, contract, state, accepted, str(folder / "library"), mesh):
        lines.append(probe(tally, name, call, expected, [folder / "library"], snapshot, state))
    source = folder / "notebooks"
    source.mkdir()
    _notebook(source, "ok", "open('ok.txt', 'w').write('ok')")
    _notebook(source, "raises", "raise ValueError('deliberate failure in a bad run')")
    root = folder / "runner"
    root.mkdir()
    with notebook_dir(source):
        for name, call, expected in runner_cases(root, full):
            lines.append(probe(tally, name, call, expected, [root], digest=receipts_digest))
    staging = [str(p.relative_to(root)) for p in root.rglob("*") if "staging" in p.name or ".old-" in p.name]
    if staging:
        tally.count("leak", f"runner left {staging} behind")
    checker = folder / "checker"
    checker.mkdir()
    for name, call, expected in checker_cases(checker, full):
        lines.append(probe(tally, name, call, expected, [checker]))
    if Tally().attempt("accepted", lambda: sl.restore(accepted, contract, mesh), state) != "exact":
        tally.lost += 1
    result = tally.as_dict()
    result["details"] = {"cases": lines, "seconds": round(time.perf_counter() - started, 2)}
    result["clean"] = tally.clean
    return result
