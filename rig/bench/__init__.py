"""`python -m rig.bench` (`make bench`'s first half): every measurement in one process, into OUT/bench.json and .png.

Sections, each checked for correctness before any clock runs and measured side by side:

1. `baseline`, first: the course loop alone in a fresh interpreter, best of several blocks
   (`baseline`); `sweep`: per-step time of whole loops (the course loop, every fused
   variant, both floors) at every batch size x width of `sweep`, with the cost model's
   pick scored against the measured fastest; `endtoend` is its 64-feature row (the timing fixture);
2. `profile`: the course loop and the fused loop traced alternately with the stage 4
   annotations, read back from the trace, with the device threads' events (a few short
   dispatches, so the committed trace stays small);
3. `roofline`: XLA's cost of one step against its measured time and this host's roofs;
4. `collectives`, `placement`, `dispatch` (`local`): three optimisations of one piece each;
5. `scaling`: the full-batch step per (rows, W).

The numbers are never test thresholds: `targets` reports each as met or not met.
"""

import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from rig import cli
from rig.bench import baseline, host, local, plot, strong, sweep, tables, targets
from shardlab.cli import add_run_arguments, count
from shardlab.core import fixtures
from shardlab.core.config import BATCH_SIZE, SEED
from shardlab.core.devices import make_mesh, setup_devices
from shardlab.evidence.sources import source_hashes
from shardlab.io import write_json
from shardlab.perf import endtoend, profile, roofline, stats

NUM_DEVICES = 4
BATCH_SIZES = (7, 64, 1023)
TRACED = 2  # traced transitions (and fused dispatches) of each loop in the profile
TRACED_STEPS = 10  # steps per traced fused dispatch (the trace grows with every step traced)


def _relative(files, out: Path) -> dict:
    return {name: str(Path(path).relative_to(out)) for name, path in files._asdict().items()}


def profiled(data, mesh, batch_size: int, seed: int, out: Path, variant: str) -> dict:
    """The course loop and the fused loop `variant` at `batch_size`, traced alternately into OUT/trace_fused."""
    logdir = out / "trace_fused"
    found = profile.before_after(data, mesh, batch_size, seed, logdir, TRACED, TRACED_STEPS, variant=variant)
    found["files"] = _relative(found["files"], out)
    found["fused_body"] = sweep.loop_name(variant)
    found["trace_bytes"] = sum(p.stat().st_size for p in logdir.rglob("*") if p.is_file())
    return found


def roofline_points(data, mesh, e2e: dict) -> dict:
    """Per batch size: one course step and one step of each 4-device fused body against its measured time."""
    roofs = roofline.roofs()
    points = {}
    for name, row in e2e.items():
        batch_size, medians = row["batch_size"], row["median_per_step_ms"]
        points[name] = {
            "course_loop": roofline.point(roofline.course_step(data, mesh, batch_size), medians["course_loop"], roofs),
            "fused_psum": roofline.point(roofline.fused_step(data, mesh, batch_size), medians["fused_psum"], roofs),
            "fused_stats": roofline.point(
                roofline.fused_step(data, mesh, batch_size, stats.body), medians["fused_stats"], roofs
            ),
        }
    return {"roofs": roofs, "points": points}


def run(
    out, batch_size=BATCH_SIZE, seed=SEED, samples=local.SAMPLES, grid=strong.GRID_ROWS, checkout=".", steps=None
) -> dict:
    """Every measurement, in one process; writes OUT/bench.json and OUT/bench.png and returns the result."""
    started = time.perf_counter()
    setup_devices(NUM_DEVICES)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    steps = steps or endtoend.STEPS
    mesh, data = make_mesh(NUM_DEVICES), fixtures.timing_fixture()
    result = {"schema": 2, "date_utc": datetime.now(UTC).isoformat(timespec="seconds"), "machine": host.machine()}
    result["config"] = {"batch_size": batch_size, "seed": seed, "samples": samples, "warmup": local.WARMUP}
    result["config"].update({"endtoend_batch_sizes": list(BATCH_SIZES), "endtoend_steps_per_sample": steps})
    result["config"].update({"traced_per_variant": local.TRACED, "ks": list(local.KS), "rows": list(grid)})
    result["baseline"] = baseline.dedicated(BATCH_SIZES, steps, seed, sweep.BOUNDARY_WIDTH)  # first, alone
    result["sweep"] = sweep.run(mesh, steps, sweep.SAMPLES, seed)
    result["endtoend"] = sweep.row(result["sweep"])
    pick = result["endtoend"][f"b{batch_size}"]["model"]["pick"] if f"b{batch_size}" in result["endtoend"] else None
    result["profile"] = profiled(data, mesh, batch_size, seed, out, pick or "stats")
    result["roofline"] = roofline_points(data, mesh, result["endtoend"])
    result["collectives"] = local.collectives(data, mesh, samples)
    result["placement"] = local.placement(data, mesh, batch_size, seed, out / "trace")
    result["dispatch"] = local.dispatch(data, mesh, batch_size, seed, samples=samples)
    result["scaling"] = strong.grid(grid)
    result["wall_times"] = host.recorded_wall_times(checkout)
    result["sources"] = source_hashes()
    result["ratios"] = targets.ratios(result)
    result["targets"] = targets.targets(result["ratios"])
    result["retired"] = targets.retired(result["ratios"])
    result["boundary"] = host.boundary(result["machine"]["physical_cores"])
    result["machine"]["load_average_at_end"] = list(os.getloadavg())
    result["elapsed_s"] = time.perf_counter() - started
    write_json(out / "bench.json", result)
    plot.figure(result, out / "bench.png")
    return result


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="bench", help="folder for bench.json, bench.png and the traces")
    add_run_arguments(parser)  # --seed, --batch-size (of the traced and scanned transitions)
    parser.add_argument("--samples", type=count, default=local.SAMPLES, help="warm samples per local variant")
    parser.add_argument("--steps", type=count, default=endtoend.STEPS, help="transitions per end-to-end sample")
    parser.add_argument(
        "--rows", type=count, nargs="*", default=list(strong.GRID_ROWS), help="row counts of the scaling grid"
    )
    parser.add_argument(
        "--checkout", default=".", help=f"folder holding {host.RUN_WALL} and {host.TEST_WALL} (default: cwd)"
    )


def command(argv=None) -> int:
    """`python -m rig.bench ARGV`: a bad command line is one UsageError line and exit code 2, as for the course's."""
    return cli.command("python -m rig.bench", __doc__.splitlines()[0], add_arguments, main, argv)


def main(args) -> int:
    from shardlab import outdir
    from shardlab.errors import OutputFolderError

    try:
        with outdir.writing(args.out, "bench") as staging:  # writes only inside OUT, replaces only its own files
            result = run(staging, args.batch_size, args.seed, args.samples, tuple(args.rows), args.checkout, args.steps)
    except OutputFolderError as exc:
        print(f"[shardlab bench] {exc}", file=sys.stderr)
        return 1
    path = Path(args.out) / "bench.json"
    for table in (tables.endtoend_table, tables.sweep_table, tables.markdown_table, tables.scaling_table):
        print(table(path))
        print()
    met = sum(t["met"] for t in result["targets"].values())
    print(
        f"[shardlab] {met}/{len(result['targets'])} targets met; bench took {result['elapsed_s']:.0f} s; "
        f"wrote {path} and bench.png"
    )
    return 0
