"""The torture campaign's categories: one record per category (its folder, its size in a full and a reduced
campaign, the trials a full campaign must reach, how it runs), the run over them, and its table.

Every category reports the columns of `outcome.Tally` (COLUMNS; the failure columns FAILURES
must be 0), so the command, the tests and docs/reliability.md read the same names.
"""

import importlib
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from types import SimpleNamespace

from rig.torture.outcome import COLUMNS, FAILURES


def _module(name: str):
    return importlib.import_module(f"rig.torture.{name}")  # imported when run: the CLI parser starts no JAX


@dataclass(frozen=True)
class Category:
    """One category of the campaign: where it writes, how big it is, what it must reach, how it runs."""

    name: str
    folder: str  # its own folder inside the campaign's work folder
    size: str | None  # the name of its size parameter (None: one fixed set of cases)
    full: float
    reduced: float
    run: object  # run(inputs, size, folder) -> the category's counts
    minimum: int = 0  # trials a full campaign must reach (0: no minimum)


CATEGORIES = (
    Category("kill_during_save", "kill", "kill_trials", 100, 16, minimum=50,
             run=lambda i, n, at: _module("killsave").run(n, at, i.states, i.contract, i.mesh, i.seed)),
    Category("corrupted_files", "corrupt", "corrupt_scale", 1.0, 0.12, minimum=200,
             run=lambda i, n, at: _module("corrupt").run(n, at, i.states, i.contract, i.foreign, i.mesh, i.seed + 1)),
    Category("bad_parameters", "bad", None, 0, 0,
             run=lambda i, n, at: _module("badparams").run(
                 at, i.data, i.config, i.contract, i.states[-1], i.mesh, not i.reduced)),
    Category("multi_process", "multi", "multi_trials", 10, 1, minimum=10,
             run=lambda i, n, at: _module("multi").run(n, at, i.seed + 2)),
    Category("output_folders", "folders", "folder_trials", 51, 17,
             run=lambda i, n, at: _module("edges").output_folders(n, at, i.seed + 3)),
    Category("hostile_restore", "hostile", "hostile_scale", 1.0, 0.2,
             run=lambda i, n, at: _module("edges").hostile_restore(
                 n, at, i.states[:12], i.contract, i.other_key, i.mesh, i.seed + 4)),
    Category("save_refusals", "save", None, 0, 0,
             run=lambda i, n, at: _module("edges").save_refusals(at, i.states[:12], i.contract)),
    Category("stale_temporaries", "stale", "stale_trials", 30, 3,
             run=lambda i, n, at: _module("edges").stale_temporaries(
                 n, at, i.states[:12], i.contract, i.mesh, i.seed + 5)),
    Category("orbax", "orbax", "orbax_children", 3, 1,
             run=lambda i, n, at: _module("edges").orbax(n, at, i.states, i.contract, i.foreign, i.mesh)),
    Category("fuzz", "fuzz", "fuzz_examples", 400, 25,
             run=lambda i, n, at: _module("fuzz").run(n, at, i.states[-1], i.contract, i.mesh, i.seed + 6)),
)  # fmt: skip
NAMES = tuple(c.name for c in CATEGORIES)
FULL = {c.size: c.full for c in CATEGORIES if c.size}
REDUCED = {c.size: c.reduced for c in CATEGORIES if c.size}


def inputs(reduced: bool, seed: int, mesh) -> SimpleNamespace:
    """What the categories torture: a real trajectory, its contract, a foreign contract, another key."""
    import shardlab as sl
    from rig.torture.subjects import experiment, trajectory

    data, config, contract = experiment()
    _, _, foreign = experiment(seed=29, batch_size=10)
    states = trajectory((REDUCED if reduced else FULL)["kill_trials"] + 1, mesh)
    other_key = sl.host_copy(sl.initial(18, data, mesh))["key"]
    return SimpleNamespace(data=data, config=config, contract=contract, foreign=foreign, states=states,
                           other_key=other_key, mesh=mesh, seed=seed, reduced=reduced)  # fmt: skip


def _run_one(category: Category, given: SimpleNamespace, work: str) -> dict:
    """One category's counts, every column present, and a write beside its own folder counted as a failure."""
    size = (REDUCED if given.reduced else FULL).get(category.size)
    result = category.run(given, size, os.path.join(work, category.folder))
    for column in COLUMNS:
        result.setdefault(column, 0)
    stray = sorted(set(os.listdir(work)) - {c.folder for c in CATEGORIES})
    if stray:
        result["writes_outside_out"] += len(stray)
        result.setdefault("failures", []).append(f"wrote {stray} outside its own folder")
        result["clean"] = False
    return result


def campaign(reduced: bool = False, seed: int = 0, only=NAMES, mesh=None, work=None) -> dict:
    """Run the chosen categories (full or reduced sizes) in `work` (a scratch folder if None); return the report."""
    if work is None:
        with tempfile.TemporaryDirectory(prefix="shardlab-torture-") as scratch:
            return campaign(reduced, seed, only, mesh, scratch)
    import shardlab as sl

    started = time.perf_counter()
    given = inputs(reduced, seed, mesh if mesh is not None else sl.make_mesh())
    work = os.fspath(work)
    os.makedirs(work, exist_ok=True)
    parent, own = os.path.dirname(os.path.abspath(work)), os.path.basename(work)
    beside = _listing(parent, own)
    report = {"mode": "reduced" if reduced else "full", "seed": seed, "categories": {}}
    by_name = {c.name: c for c in CATEGORIES}
    for name in only:
        report["categories"][name] = _run_one(by_name[name], given, work)
    outside = sorted(_listing(parent, own) ^ beside)
    report["writes_beside_work"] = outside
    report["trials"] = sum(c.get("trials", 0) for c in report["categories"].values())
    report["ok"] = not outside and all(
        c.get("clean", False) and all(c.get(k, 0) == 0 for k in FAILURES) for c in report["categories"].values()
    )
    report["wall_seconds"] = round(time.perf_counter() - started, 1)
    report["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": sys.version.split()[0]}
    return report


def _listing(folder: str, skip: str) -> set:
    return {name for name in os.listdir(folder) if name != skip}


SHORT = {"restored_exact": "exact", "wrong_accepts": "wrong", "unclear_errors": "unclear"}
SHORT["writes_outside_out"] = "outside"


def _notes(report: dict) -> list[str]:
    """The lines under the table: kill landings, failures, memory overruns, categories short of their minimum."""
    minimum = {c.name: c.minimum for c in CATEGORIES}
    kills = report["categories"].get("kill_during_save")
    lines = [f"kill landed after: {kills['details']['kill_landed_after']}"] if kills else []
    for name, c in report["categories"].items():
        lines += [f"  {name}: {f}" for f in c.get("failures", [])]
        over = c.get("details", {}).get("memory_over_bound")
        if over:
            lines.append(f"  {name}: {len(over)} refusal(s) over the memory bound, e.g. {over[0]}")
        if report["mode"] == "full" and c.get("trials", 0) < minimum[name]:
            lines.append(f"  {name}: only {c.get('trials', 0)} trials, a full campaign needs {minimum[name]}")
    if report.get("writes_beside_work"):
        lines.append(f"  wrote beside its folder: {report['writes_beside_work']}")
    return lines


def summary(report: dict) -> str:
    """A fixed-width table of the counts, the kill landings, and the verdict."""
    lines = [f"{'category':<18}" + "".join(f"{SHORT.get(k, k):>9}" for k in COLUMNS) + f"{'seconds':>9}"]
    for name, c in report["categories"].items():
        seconds = c.get("details", {}).get("seconds", 0)
        lines.append(f"{name:<18}" + "".join(f"{c.get(k, 0):>9}" for k in COLUMNS) + f"{seconds:>9}")
    lines += _notes(report)
    verdict = "OK: every failure column is 0" if report["ok"] else "FAILED (or incomplete): see above"
    lines.append(f"{verdict}; {report.get('trials', 0)} trials, wall {report['wall_seconds']} s ({report['mode']})")
    return "\n".join(lines)
