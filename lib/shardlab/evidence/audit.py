"""The audit: `audit.json`, one object that says what a run used, observed and where its files are.

`write_audit(out_dir)` runs after every notebook of `python -m shardlab run` succeeded. Every
path it stores is relative to the folder holding audit.json; no absolute path is written.

Schema of audit.json (schema_version 1; key order carries no meaning):

- `schema_version` (int) — 1.
- `run` — `seed`, `batch_size`, `implementation` ("reference", or `{"file": name, "sha256": ...}`
  for a learner's file), `notebooks` (names executed, in order), `implementation_by_notebook`
  (name -> what that notebook actually ran: the `implementation` above, "reference" where the
  notebook always runs the reference, or a "not loaded: ..." sentence where no cell reads the
  parameter) and `runs_reference` (name -> why, for the notebooks that always run the reference).
- `environment` — `python`, `packages` (name -> version: jax, jaxlib, numpy, ...), `platform`,
  `machine`, `cpu_count`, `usable_cpus`, `backend`, `devices` (list of str), `flags`
  (JAX_PLATFORMS, XLA_FLAGS, jax_num_cpu_devices, jax_enable_x64), as seen by the stage 4 kernel.
- `sources` — what determines the receipts, hashed (`evidence.sources.receipt_sources`): 'shardlab/<path>'
  -> sha256 of each notebook and data file, and of each module the run can execute with its comments
  and docstrings left out (of `ast.dump`); 'dist/<name>' -> the installed version of each runtime dependency.
- `notebooks` — name -> {`executed`: "<name>.ipynb", `html`: "<name>.html" or null}.
- `timing` — for each variant `eager_4dev`, `compiled_4dev`, `compiled_1dev`: `samples_ms` (list,
  every warm sample in the order taken), `median_ms`, `q1_ms` and `q3_ms` (the middle half), `lower_ms`
  and `compile_ms` (null for the eager variant: it has no whole-program compile), `warm_compilations`
  (`count`, `total_ms`: XLA compilations during the last warm-up call), `sample_compilations`
  (`median_count`, `median_ms`: the same, per timed call) and `median_less_compile_ms` (with its quartiles:
  each timed call less its own compile time); plus `ratios` (`compiled_4dev_over_compiled_1dev`,
  `eager_4dev_over_compiled_4dev`, `eager_4dev_less_compile_over_compiled_4dev`, of medians), `order`
  (variant order of each sampling round), `boundary` (what a sample includes) and
  `max_abs_error_vs_numpy` (per variant, checked before timing).
- `trace` — `xplane` and `perfetto` (relative paths), `batch_size`, `transitions` (one object per
  traced transition: `transition`, `start_ms`, `sharded_learner_step_ms`, `prepare_and_place_ms`,
  `compiled_update_and_wait_ms`, `reshuffled`, `step`), `dominant` (which annotation has the
  larger median, and the factor), `prepare_breakdown` (per transition: `jitted_dispatch_ms`,
  `placement_ms`, `other_ms`, and `dispatched`, the jitted functions called inside) and
  `hypothesis` (the one tested, as `evidence.hypothesis.stated` checked it: `change`, `annotation`,
  `control`, `baseline_ms`, `threshold_ms`, `because`, `whose` (the learner's, or the
  worked example's while the learner's cell is empty), `text`; the verdicts, judged with the control's
  drift in view, are stage 4's `change` result) and `example_run`.
- `device_counts` — stage 1's observed valid rows per device: `batch_of_7_rows`, `batch_of_1_row`,
  `walk` (one list per batch of its walk), `from` (the notebook).
- `all_reduce` — `count` (counted here in the IR file), `ir` (relative path), `recorded` (stage 2's count).
- `recovery` — stage 3's exact differences after a fresh-kernel resume (all zero when correct).
- `fresh_kernel_recovery` — fixture name (core.config.FIXTURES) -> `seed`, `batch_size`, `folder`
  (where its stage3a_checkpoint/stage3b_resume pair ran: "." for this run's own parameters,
  "fixtures/<name>" for the other fixture), `recovery` (as above), `saved_by` and `resumed_by`
  (the two kernels' process identities) and `divergence` (null when no step differs); null
  for a fixture whose pair did not run.
- `faults` — stage 3's fault rows: fixture, seed, batch_size, fault, max_weight_error,
  ids_changed, first_divergence_step.
- `figure` — `png` and `svg` (relative paths) of the evidence figure and its `panels` (three, or two
  when stage 3a did not run into the folder).
- `drills` — the content of stage 5's drills.json when it exists in the folder, else null.
- `results` — notebook name -> every result it recorded (verbatim copy of results/<name>.json,
  for every notebook that ran, stage 5 included).
- `missing` — results the report looked for and did not find (empty in a complete run).
"""

import ast
import json
import os
import platform
from importlib import metadata
from pathlib import Path

from shardlab.core.config import FIXTURES
from shardlab.core.files import sha256_file
from shardlab.core.update import count_all_reduce
from shardlab.course import results as record
from shardlab.course.catalog import FIXTURE_DIR, NOTEBOOKS
from shardlab.evidence.sources import receipt_sources
from shardlab.io import write_json

SCHEMA_VERSION = 1


AUDIT = "audit.json"


IR = "step.stablehlo.mlir"


DRILLS = "drills.json"  # written by stage 5's drills, when they ran
STAGE4 = "stage4a_profile"


PACKAGES = ("jax", "jaxlib", "numpy", "matplotlib", "orbax-checkpoint", "papermill")


def environment() -> dict:
    """Interpreter, package versions, platform, CPUs, JAX devices and flags of the calling process."""
    import jax

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "python": platform.python_version(),
        "packages": versions,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "flags": {
            "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS"),
            "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
            "jax_num_cpu_devices": jax.config.jax_num_cpu_devices,
            "jax_enable_x64": bool(jax.config.jax_enable_x64),
        },
    }


def stage_results(out_dir, notebook: str) -> dict | None:
    """Everything `notebook` recorded in out_dir/results, or None if it has not run there."""
    try:
        return record.load(out_dir, notebook)
    except FileNotFoundError:
        return None


def _device_counts(stage1: dict | None) -> dict | None:
    """Stage 1's observed valid rows per device: the 7-row and 1-row batches, and every batch of its walk."""
    if not stage1 or "device_counts_7_rows" not in stage1:
        return None
    return {
        "from": "stage1_batches",
        "batch_of_7_rows": stage1["device_counts_7_rows"],
        "batch_of_1_row": stage1.get("device_counts_1_row"),
        "walk": [b.get("device_counts") for b in stage1.get("batches", [])],
    }


PARAMETER_TAGS = {"parameters", "injected-parameters"}
NOT_LOADED = "not loaded: this notebook never reads its `implementation` parameter"


def reads_implementation(nb) -> bool:
    """True if a code cell other than the parameter cells reads the name `implementation` (parsed, never run)."""
    for cell in nb.cells:
        if cell.cell_type != "code" or PARAMETER_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            tree = ast.parse(source)
        except SyntaxError:
            return True  # unreadable here: credit it rather than guess it away
        if any(isinstance(n, ast.Name) and n.id == "implementation" for n in ast.walk(tree)):
            return True
    return False


def _run_section(out_dir: Path, executed: list[str]) -> dict:
    """Seed, batch size and implementation from the executed notebooks' papermill parameters.

    A notebook is credited with the implementation only if it reads the parameter (stage4b_beyond never
    does); one that runs the reference whatever it is given says so (RUNS_REFERENCE).
    """
    import nbformat  # here, not at import: the stage 4 kernels import this module and never read a notebook

    books = {n: nbformat.read(out_dir / f"{n}.ipynb", as_version=4) for n in executed}
    params = [books[n].metadata["papermill"]["parameters"] for n in executed]
    first = params[0] if params else {}
    spec = first.get("implementation", "reference")
    if spec not in ("reference", "", None):
        spec = {"file": Path(spec).name, "sha256": sha256_file(spec) if Path(spec).is_file() else None}

    def ran(name: str):
        if name in RUNS_REFERENCE:
            return "reference"
        return spec if reads_implementation(books[name]) else NOT_LOADED

    def given(name: str):  # a notebook that declares no seed (stage3c_orbax_lesson) is given none
        return next((p[name] for p in params if name in p), None)

    return {
        "seed": given("seed"),
        "batch_size": given("batch_size"),
        "implementation": spec,
        "notebooks": executed,
        "implementation_by_notebook": {n: ran(n) for n in executed},
        "runs_reference": {n: why for n, why in RUNS_REFERENCE.items() if n in executed},
    }


def _fresh_kernel_recovery(out_dir: Path, run: dict) -> dict:
    """Every course fixture's fresh-kernel resume: this run's own in out_dir, the others in fixtures/<name>."""
    found = {}
    for name, (seed, batch_size) in FIXTURES.items():
        folder = "." if (seed, batch_size) == (run["seed"], run["batch_size"]) else f"{FIXTURE_DIR}/{name}"
        resumed = stage_results(out_dir / folder, "stage3b_resume")
        if not resumed or "recovery" not in resumed:
            found[name] = None
            continue
        process = resumed.get("process", {})
        found[name] = {
            "seed": seed,
            "batch_size": batch_size,
            "folder": folder,
            "recovery": resumed["recovery"],
            "saved_by": process.get("saved_by"),
            "resumed_by": process.get("resumed_by"),
            "divergence": resumed.get("divergence"),
        }
    return found


# Notebooks that run the reference whatever `implementation` says, and why (said in the notebook too).


STAGE5_REFERENCE = (
    "its controller processes always run the reference implementation; a learner's file is loaded but not run "
    "(the contracts it compares are the course's own)"
)
RUNS_REFERENCE = {"stage5a_protocol": STAGE5_REFERENCE, "stage5b_scaling": STAGE5_REFERENCE}


def audit(out_dir, notebooks: list[str] | None = None) -> dict:
    """The audit object for an output folder (see the module docstring for the schema)."""

    out_dir = Path(out_dir)
    executed = [n for n in (notebooks or NOTEBOOKS) if (out_dir / f"{n}.ipynb").is_file()]
    results = {p.stem: record.load(out_dir, p.stem) for p in sorted((out_dir / record.RESULTS).glob("*.json"))}
    stage4 = results.get(STAGE4, {})
    missing = [f"{n}.ipynb" for n in (notebooks or NOTEBOOKS) if n not in executed]

    def take(source: dict | None, key: str, where: str):
        if source and key in source:
            return source[key]
        missing.append(f"{where}:{key}")
        return None

    stage3_ckpt, stage3b_resume = results.get("stage3a_checkpoint"), results.get("stage3b_resume")
    counts = _device_counts(results.get("stage1_batches"))
    recorded = (results.get("stage2_update") or {}).get("all_reduce")
    ir, drills = out_dir / IR, out_dir / DRILLS
    if counts is None:
        missing.append("stage1_batches:device_counts_7_rows")
    if recorded is None:
        missing.append("stage2_update:all_reduce")
    if not ir.is_file():
        missing.append(IR)
    run = _run_section(out_dir, executed)
    fresh = _fresh_kernel_recovery(out_dir, run)
    missing += [f"stage3b_resume:recovery of fixture {name}" for name, found in fresh.items() if found is None]
    return {
        "schema_version": SCHEMA_VERSION,
        "run": run,
        "environment": take(stage4, "environment", STAGE4),
        "sources": receipt_sources(),
        "notebooks": {
            n: {"executed": f"{n}.ipynb", "html": f"{n}.html" if (out_dir / f"{n}.html").is_file() else None}
            for n in executed
        },
        "timing": take(stage4, "timing", STAGE4),
        "trace": take(stage4, "trace", STAGE4),
        "device_counts": counts,
        "all_reduce": {
            "count": count_all_reduce(ir.read_text()) if ir.is_file() else None,
            "ir": IR if ir.is_file() else None,
            "recorded": recorded.get("count") if isinstance(recorded, dict) else recorded,
        },
        "recovery": take(stage3b_resume, "recovery", "stage3b_resume"),
        "fresh_kernel_recovery": fresh,
        "faults": take(stage3_ckpt, "faults", "stage3a_checkpoint"),
        "figure": take(stage4, "figure", STAGE4),
        "drills": json.loads(drills.read_text()) if drills.is_file() else None,
        "results": results,
        "missing": missing,
    }


def write_audit(out_dir) -> Path:
    """Write out_dir/audit.json (atomically) and return its path."""
    path = Path(out_dir) / AUDIT
    write_json(path, audit(out_dir))
    return path
