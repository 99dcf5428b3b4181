"""`python -m shardlab bench`: three optimisations measured beside their baselines, in one process.

1. collectives: the packed one-all_reduce step against the three-all_reduce step and
   the compiled single-device step (warm timings, stage 4 harness).
2. placement: transitions with the dataset resident on the devices against stage 2
   transitions, traced alternately in one capture (stage 4 annotations).
3. dispatch: K updates per `lax.scan` call against one blocking update per call.
Then the scaling grid (rows x device count) and the recorded wall times of `make run`
and `make test`. Every variant is checked against NumPy before any clock runs; every
comparison alternates its variants; every sample is kept. Numbers are never test
thresholds: the targets are reported as met or not met.
"""

import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from shardlab.core import fixtures
from shardlab.core.batch import ROWS, next_batch, place
from shardlab.core.devices import AXIS, make_mesh, setup_devices
from shardlab.core.errors import TraceError, VariantMismatchError
from shardlab.core.state import initial, replicate
from shardlab.core.update import count_all_reduce, make_step, stablehlo
from shardlab.evidence import timing, trace
from shardlab.evidence.report import source_hashes
from shardlab.lessons import oracle
from shardlab.perf import multistep, resident
from shardlab.perf.packed import make_packed_step

NUM_DEVICES = 4
SAMPLES = 41  # warm samples per variant (stage 4 keeps 11; the bench can afford more)
WARMUP = 3
TRACED = 12  # traced transitions per variant
KS = (1, 2, 4, 8, 16)
GRID_ROWS = (1024, 4096, 16384, 65536, 262144)
WIDTH = 64
DEVICES = (1, 2, 4)
GRID_SAMPLES = 11
TARGETS = {  # ratio: (comparison, bound), from the issue; reported, never asserted
    "packed_4dev_over_single": ("<=", 2.3),
    "prepare_over_update_after": ("<=", 1.0),
    "k16_speedup": (">=", 2.5),
}
RUN_WALL = "receipts/wall_time.json"  # written by `make run` (runner.run)
TEST_WALL = ".pytest_cache/v/shardlab/wall_time"  # written by `make test` (tests/conftest.py)


def median(values) -> float:
    """Median as a plain float."""
    return float(np.median(values))


def boundary(cores: int) -> str:
    """What every number in bench.json was measured at, and what it does not show."""
    return (
        f"Four logical CPU devices in one process on a {cores}-core host: collectives are memory copies "
        "between threads, so device counts above the physical core count add scheduling, not compute. "
        "Times are warm (compiled, inputs placed) except the traced transitions, which include "
        "sampling and placement. Nothing here measures a network, an accelerator or several hosts."
    )


def _floor_programs(mesh, features) -> dict:
    """Four-device programs with (almost) no work: one scalar psum, and no collective at all."""
    first = jax.jit(jax.shard_map(lambda x: jax.lax.psum(x[0, 0], AXIS), mesh=mesh, in_specs=ROWS, out_specs=P()))
    local = jax.jit(jax.shard_map(lambda x: x[:1, 0] * 2, mesh=mesh, in_specs=ROWS, out_specs=P(AXIS)))
    return {
        "floor_psum_4dev": timing.compile_variant(first, (features,)),
        "floor_local_4dev": timing.compile_variant(local, (features,)),
    }


def _hlo_all_reduces(executable) -> list[str]:
    """The all-reduce instructions of a compiled executable's optimised HLO, cut before their attributes."""
    lines = [line.strip() for line in executable.as_text().splitlines() if " all-reduce(" in line]
    return [line.split(", channel_id")[0] for line in lines]


def collectives(data, mesh, samples=SAMPLES, warmup=WARMUP) -> dict:
    """Packed vs three-reduction four-device step vs the single-device step, same inputs, interleaved.

    Two do-nothing four-device programs are measured in the same rotation: the fixed
    cost of running four device programs, with and without one all-reduce.
    """
    host = timing.inputs(data, mesh)
    built = timing.build(host, mesh)
    args = built["compiled_4dev"].args
    variants = {
        "compiled_1dev": built["compiled_1dev"],
        "compiled_4dev": built["compiled_4dev"],
        "packed_4dev": timing.compile_variant(make_packed_step(mesh), args),
    }
    errors = timing.check(variants, host)
    packed_out, plain_out = (variants[n].fn(*args) for n in ("packed_4dev", "compiled_4dev"))
    variants.update(_floor_programs(mesh, args[0]))
    result = timing.summary(variants, timing.measure(variants, samples, warmup))
    result["max_abs_error_vs_numpy"] = errors
    result["packed_equals_three_reductions_bitwise"] = all(
        np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(packed_out, plain_out)
    )
    result["all_reduce"] = {
        "stablehlo": {
            "compiled_4dev": count_all_reduce(stablehlo(make_step(mesh), *args)),
            "packed_4dev": count_all_reduce(stablehlo(make_packed_step(mesh), *args)),
        },
        "optimised_hlo": {n: _hlo_all_reduces(variants[n].fn) for n in ("compiled_4dev", "packed_4dev")},
    }
    return result


def _check_steps(ids: list, losses, weights, data, label: str, rtol=1e-4, atol=1e-5) -> float:
    """Max abs difference of losses and final weights from NumPy updates over `ids` from zero; raise if off."""
    w = v = np.zeros(data.features.shape[1])
    want = []
    for batch in ids:
        w, v, loss, _ = oracle.momentum_step(data.features[batch], data.targets[batch], np.ones(len(batch)), w, v)
        want.append(loss)
    got = [np.asarray(losses, np.float64), np.asarray(weights, np.float64)]
    for name, a, b in zip(("losses", "weights"), got, (np.array(want), w)):
        if not np.allclose(a, b, rtol=rtol, atol=atol):
            raise VariantMismatchError(
                f"{label}: {name} differ from NumPy by up to {np.max(np.abs(a - b)):.3g}; nothing was timed"
            )
    return max(float(np.max(np.abs(a - b))) for a, b in zip(got, (np.array(want), w)))


def dispatch(data, mesh, batch_size, seed, ks=KS, samples=SAMPLES, warmup=WARMUP) -> dict:
    """Per-update time of K updates per `lax.scan` call against one blocking compiled update per call."""
    start = initial(seed, data, mesh)
    weights, momentum = start["weights"], start["momentum"]
    _, batch = next_batch(start, data, batch_size, mesh)
    variants = {"blocking_k1": timing.compile_variant(make_step(mesh), (*batch[:3], weights, momentum))}
    variants["blocking_k1_packed"] = timing.compile_variant(make_packed_step(mesh), variants["blocking_k1"].args)
    errors = {}
    for k in ks:
        _, placed, ids = multistep.prepare_many(start, data, batch_size, k, mesh)
        name = f"scan_k{k}"
        variants[name] = timing.compile_variant(multistep.make_multistep(mesh), (*placed, weights, momentum))
        new_w, _, losses = variants[name].fn(*variants[name].args)
        errors[name] = _check_steps(ids, losses, new_w, data, name)
    # also tried: the packed body inside the scan (one all_reduce per update instead of three)
    name = f"scan_k{ks[-1]}_packed"
    variants[name] = timing.compile_variant(
        multistep.make_multistep(mesh, packed=True), variants[f"scan_k{ks[-1]}"].args
    )
    new_w, _, losses = variants[name].fn(*variants[name].args)
    errors[name] = _check_steps(ids, losses, new_w, data, name)
    for name in ("blocking_k1", "blocking_k1_packed"):
        new_w, _, loss, _ = variants[name].fn(*variants[name].args)
        errors[name] = _check_steps([batch.ids], [loss], new_w, data, name)
    result = timing.summary(variants, timing.measure(variants, samples, warmup))
    steps = {
        "blocking_k1": 1,
        "blocking_k1_packed": 1,
        **{f"scan_k{k}": k for k in ks},
        f"scan_k{ks[-1]}_packed": ks[-1],
    }
    result["per_update_median_ms"] = {n: result[n]["median_ms"] / steps[n] for n in variants}
    result["max_abs_error_vs_numpy"] = errors
    result["batch_size"] = batch_size
    return result


def _paths(data, placed, mesh) -> dict:
    """(source, step, next_batch) of a stage 2 transition ("before") and a resident one ("after")."""
    return {
        "before": (data, make_step(mesh), next_batch),
        "after": (placed, resident.make_resident_step(mesh), resident.next_batch),
    }


def _alternating(paths: dict, data, batch_size, seed, mesh, count):
    """`count` traced transitions of each path from the same start, alternating which goes first."""
    states = {name: initial(seed, data, mesh) for name in paths}
    order, log = [], {name: [] for name in paths}
    for index in range(count):
        for name in sorted(paths, reverse=index % 2 == 1):
            source, step, prepare = paths[name]
            states[name], loss, ids = trace.traced_transition(states[name], source, batch_size, step, mesh, prepare)
            log[name].append({"loss": loss, "ids": ids, "weights": states[name]["weights"]})
            order.append(name)
    return states, log, order


def placement(data, mesh, batch_size, seed, logdir, count=TRACED) -> dict:
    """Traced prepare_and_place / compiled_update_and_wait before and after keeping the dataset on the devices."""
    paths = _paths(data, resident.place_dataset(data, mesh), mesh)
    _, warm, _ = _alternating(paths, data, batch_size, seed, mesh, 3)  # compiles; checked before tracing
    for name, entries in warm.items():
        _check_steps([e["ids"] for e in entries], [e["loss"] for e in entries], entries[-1]["weights"], data, name)
    (states, log, order), files = trace.capture(
        logdir, lambda: _alternating(paths, data, batch_size, seed, mesh, count), replace=True
    )
    rows = trace.annotation_durations(files)
    if len(rows) != len(order):
        raise TraceError(f"{len(order)} transitions were traced but the capture holds {len(rows)}; capture again")
    base = Path(logdir).parent  # paths in bench.json are relative to the output folder
    result = {"trace": {k: str(Path(v).relative_to(base)) for k, v in files._asdict().items()}, "order": order}
    ids = {name: [entry["ids"] for entry in log[name]] for name in log}
    if any(not np.array_equal(a, b) for a, b in zip(ids["before"], ids["after"])):
        raise VariantMismatchError("resident transitions selected other sample IDs than stage 2 transitions")
    for name in ("before", "after"):
        mine = [row for row, who in zip(rows, order) if who == name]
        errors = _check_steps(ids[name], [e["loss"] for e in log[name]], states[name]["weights"], data, name)
        result[name] = {
            "transitions": mine,
            **{f"median_{a}_ms": median([r[f"{a}_ms"] for r in mine]) for a in (trace.PREPARE, trace.UPDATE)},
            "max_abs_error_vs_numpy": errors,
        }
    weights = [np.asarray(states[n]["weights"]) for n in ("before", "after")]
    result["identical_ids"] = True
    result["max_abs_weight_difference"] = float(np.max(np.abs(weights[0] - weights[1])))
    result["weights_bitwise_equal"] = bool(np.array_equal(*weights))
    result["batch_size"] = batch_size
    return result


def _placed(host: dict, mesh) -> tuple:
    """The step's five arguments from `timing.inputs`, placed on `mesh`."""
    batch = place(host["features"], host["targets"], host["mask"], mesh)
    return (*batch, replicate(host["weights"], mesh), replicate(host["momentum"], mesh))


def scaling(rows_grid=GRID_ROWS, devices=DEVICES, samples=GRID_SAMPLES, seed=fixtures.TIMING_SEED) -> dict:
    """Full-batch compiled step per (rows, W) on meshes over the first W devices; the W alternate.

    Efficiency = throughput_W / (W * throughput_1), throughput in rows per second.
    """
    table = []
    for rows in rows_grid:
        data = fixtures.synthetic(rows, WIDTH, seed)
        host = timing.inputs(data, make_mesh(max(devices)))
        variants = {
            f"w{w}": timing.compile_variant(make_step(make_mesh(w)), _placed(host, make_mesh(w))) for w in devices
        }
        timing.check(variants, host, rtol=1e-3, atol=1e-3)
        measured = timing.summary(variants, timing.measure(variants, samples, WARMUP))
        throughput = {w: rows / measured[f"w{w}"]["median_ms"] * 1e3 for w in devices}
        for w in devices:
            row = {key: measured[f"w{w}"][key] for key in ("median_ms", "samples_ms", "compile_ms")}
            efficiency = throughput[w] / (w * throughput[1])
            table.append({"rows": rows, "devices": w, **row, "rows_per_s": throughput[w], "efficiency": efficiency})
        del variants, host, data
    return {"width": WIDTH, "table": table}


def machine() -> dict:
    """The host the numbers come from."""
    import psutil

    return {
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cpus": psutil.cpu_count(logical=True),
        "processor": _cpu_model(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "jax": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
        "load_average_1_5_15": list(os.getloadavg()),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def recorded_wall_times(repo: Path) -> dict:
    """Wall times of `make run` and `make test` as their own last runs recorded them under `repo` (not re-measured)."""
    repo = Path(repo)
    found = {}
    for name, relative in (("make_run", RUN_WALL), ("make_test", TEST_WALL)):
        path = repo / relative
        try:
            found[name] = {**json.loads(path.read_text()), "source": relative}
        except (OSError, ValueError):
            found[name] = {"source": relative, "status": f"not recorded: run `{name.replace('_', ' ')}` first"}
    return found


def ratios(result: dict) -> dict:
    """The issue's ratios, from the medians above."""
    coll, place, disp = result["collectives"], result["placement"], result["dispatch"]["per_update_median_ms"]
    single = coll["compiled_1dev"]["median_ms"]
    return {
        "packed_4dev_over_single": coll["packed_4dev"]["median_ms"] / single,
        "unpacked_4dev_over_single": coll["compiled_4dev"]["median_ms"] / single,
        "prepare_over_update_before": _prepare_over_update(place["before"]),
        "prepare_over_update_after": _prepare_over_update(place["after"]),
        "k16_speedup": disp["blocking_k1"] / disp["scan_k16"],
        "k16_packed_speedup": disp["blocking_k1"] / disp["scan_k16_packed"],
        "k16_packed_over_k1_packed": disp["blocking_k1_packed"] / disp["scan_k16_packed"],
        "floor_psum_4dev_over_single": coll["floor_psum_4dev"]["median_ms"] / single,
        "floor_local_4dev_over_single": coll["floor_local_4dev"]["median_ms"] / single,
    }


def _prepare_over_update(side: dict) -> float:
    return side[f"median_{trace.PREPARE}_ms"] / side[f"median_{trace.UPDATE}_ms"]


def targets(found: dict) -> dict:
    """Each target with its measured ratio and whether this run met it."""
    rows = {}
    for key, (op, bound) in TARGETS.items():
        value = found[key]
        rows[key] = {
            "target": f"{op} {bound}",
            "measured": value,
            "met": value <= bound if op == "<=" else value >= bound,
        }
    rows["packed_4dev_over_single"]["context"] = {  # what no change to the update can remove
        "floor_psum_4dev_over_single": found["floor_psum_4dev_over_single"],
        "meaning": "a four-device program whose only work is one scalar psum, over the whole single-device step",
    }
    return rows


def run(out, batch_size: int = 7, seed: int = 17, samples: int = SAMPLES, grid=GRID_ROWS, checkout=".") -> dict:
    """Every measurement, in one process; writes OUT/bench.json and OUT/bench.png and returns the result."""
    started = time.perf_counter()
    setup_devices(NUM_DEVICES)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    mesh, data = make_mesh(NUM_DEVICES), fixtures.timing_fixture()
    result = {"schema": 1, "date_utc": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine()}
    result["config"] = {"batch_size": batch_size, "seed": seed, "samples": samples, "warmup": WARMUP}
    result["config"].update({"traced_per_variant": TRACED, "ks": list(KS), "rows": list(grid), "width": WIDTH})
    result["collectives"] = collectives(data, mesh, samples)
    result["placement"] = placement(data, mesh, batch_size, seed, out / "trace")
    result["dispatch"] = dispatch(data, mesh, batch_size, seed, samples=samples)
    result["scaling"] = scaling(grid)
    result["wall_times"] = recorded_wall_times(checkout)
    result["sources"] = source_hashes()
    result["ratios"] = ratios(result)
    result["targets"] = targets(result["ratios"])
    result["boundary"] = boundary(result["machine"]["physical_cores"])
    result["machine"]["load_average_at_end"] = list(os.getloadavg())
    result["elapsed_s"] = time.perf_counter() - started
    (out / "bench.json").write_text(json.dumps(result, indent=1, default=_plain))
    figure(result, out / "bench.png")
    return result


def _plain(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot store {type(value).__name__} in bench.json")


def figure(result: dict, path) -> Path:
    """Six panels: collectives, traced preparation vs update, time per update vs K; the scaling grid."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    _collectives_panel(axes[0, 0], result["collectives"])
    _placement_panel(axes[0, 1], result["placement"])
    _dispatch_panel(axes[0, 2], result["dispatch"]["per_update_median_ms"], result["config"]["ks"])
    _scaling_panels(axes[1], result["scaling"]["table"], result["machine"]["physical_cores"])
    fig.suptitle(
        f"shardlab bench, {result['date_utc']}: 4 logical CPU devices on "
        f"{result['machine']['physical_cores']} physical cores (medians; boxes show every sample)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def _collectives_panel(ax, coll: dict) -> None:
    names = ("compiled_1dev", "compiled_4dev", "packed_4dev")
    ax.boxplot([coll[n]["samples_ms"] for n in names], tick_labels=["1 device", "4 dev, 3 psums", "4 dev, 1 psum"])
    ax.set(yscale="log", ylabel="ms per warm step", title="one collective instead of three (1,023 x 64)")


def _placement_panel(ax, place: dict) -> None:
    for side, marker, style in (("before", "o", ":"), ("after", "s", "-")):
        rows = place[side]["transitions"]
        for annotation, colour in ((trace.PREPARE, "tab:orange"), (trace.UPDATE, "tab:blue")):
            values = [r[f"{annotation}_ms"] for r in rows]
            ax.plot(
                range(1, len(rows) + 1),
                values,
                marker=marker,
                linestyle=style,
                color=colour,
                label=f"{annotation} ({side})",
            )
    ax.set(yscale="log", xlabel="traced transition", ylabel="ms (from the trace)", title="dataset kept on the devices")
    ax.legend(fontsize=7)


def _dispatch_panel(ax, per: dict, ks: list) -> None:
    ax.plot(ks, [per[f"scan_k{k}"] for k in ks], marker="o", label="K updates per lax.scan call")
    ax.axhline(per["blocking_k1"], color="grey", linestyle="--", label="one blocking update per call")
    ax.set(xscale="log", yscale="log", xlabel="K", ylabel="ms per update", title="several updates per dispatch")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.legend(fontsize=7)


def _scaling_panels(axes, table: list, cores: int) -> None:
    for w in sorted({r["devices"] for r in table}):
        mine = [r for r in table if r["devices"] == w]
        rows = [r["rows"] for r in mine]
        for ax, key in zip(axes, ("median_ms", "rows_per_s", "efficiency")):
            ax.plot(rows, [r[key] for r in mine], marker="o", label=f"W = {w}")
    labels = ("compiled step, ms", "rows per second", "throughput_W / (W throughput_1)")
    for ax, label in zip(axes, labels):
        ax.set(xscale="log", xlabel="rows (x 64 features)", ylabel=label)
        ax.legend(fontsize=7)
    axes[0].set_yscale("log")
    axes[1].set_yscale("log")
    axes[2].set_title(f"efficiency, W logical devices on {cores} cores")


def before_after(path) -> list[dict]:
    """Rows of the before/after table, read from a bench.json receipt."""
    result = json.loads(Path(path).read_text())
    coll, place, disp = result["collectives"], result["placement"], result["dispatch"]
    found, goals = result["ratios"], result["targets"]
    prepare, update = f"median_{trace.PREPARE}_ms", f"median_{trace.UPDATE}_ms"
    ir = coll["all_reduce"]["stablehlo"]
    return [
        _row("one collective", "StableHLO all_reduce ops", ir["compiled_4dev"], ir["packed_4dev"]),
        _row(
            "one collective",
            "4-device step median (ms)",
            coll["compiled_4dev"]["median_ms"],
            coll["packed_4dev"]["median_ms"],
        ),
        _row(
            "one collective",
            "4-device / 1-device median",
            found["unpacked_4dev_over_single"],
            found["packed_4dev_over_single"],
            goals["packed_4dev_over_single"],
        ),
        _row(
            "data on devices", "traced prepare_and_place median (ms)", place["before"][prepare], place["after"][prepare]
        ),
        _row(
            "data on devices",
            "traced compiled_update_and_wait median (ms)",
            place["before"][update],
            place["after"][update],
        ),
        _row(
            "data on devices",
            "prepare / update",
            found["prepare_over_update_before"],
            found["prepare_over_update_after"],
            goals["prepare_over_update_after"],
        ),
        _row(
            "K updates per dispatch",
            "ms per update (K=1 blocking -> K=16)",
            disp["per_update_median_ms"]["blocking_k1"],
            disp["per_update_median_ms"]["scan_k16"],
        ),
        _row("K updates per dispatch", "speed-up at K=16", 1.0, found["k16_speedup"], goals["k16_speedup"]),
        _row("K per dispatch + one collective", "speed-up at K=16 (also tried)", 1.0, found["k16_packed_speedup"]),
        _row("K per dispatch, packed both sides", "packed K=1 / packed K=16", 1.0, found["k16_packed_over_k1_packed"]),
    ]


def _row(optimisation, measure, before, after, goal=None) -> dict:
    met = "" if goal is None else ("met" if goal["met"] else "not met") + f" ({goal['target']})"
    return {"optimisation": optimisation, "measure": measure, "before": before, "after": after, "target": met}


def markdown_table(path) -> str:
    """The before/after table of a bench.json receipt as Markdown (for the stage 4 notebook and the README)."""
    result = json.loads(Path(path).read_text())
    lines = ["| optimisation | measure | before | after | target |", "| --- | --- | ---: | ---: | --- |"]
    for row in before_after(path):
        lines.append(
            f"| {row['optimisation']} | {row['measure']} | {row['before']:.4g} | {row['after']:.4g} | {row['target']} |"
        )
    m = result["machine"]
    lines.append("")
    lines.append(
        f"Measured {result['date_utc']} on {m['physical_cores']} physical cores ({m['processor']}), "
        f"{len(m['devices'])} logical CPU devices, JAX {m['jax']}."
    )
    return "\n".join(lines)


def scaling_table(path) -> str:
    """The scaling grid of a bench.json receipt as Markdown."""
    result = json.loads(Path(path).read_text())
    lines = ["| rows | W | median ms | rows/s | efficiency |", "| ---: | ---: | ---: | ---: | ---: |"]
    for r in result["scaling"]["table"]:
        lines.append(
            f"| {r['rows']:,} | {r['devices']} | {r['median_ms']:.4g} | {r['rows_per_s']:.3g} | {r['efficiency']:.2f} |"
        )
    lines.append("")
    lines.append(f"Host: {result['machine']['physical_cores']} physical cores. " + SCALING_NOTE)
    return "\n".join(lines)


SCALING_NOTE = (
    "W logical devices share the same cores and memory in one process: efficiency below 1 here is the cost of "
    "splitting work into W programs plus the all-reduce between them on hardware that does not grow with W; "
    "it cannot show what W real devices or hosts, each with its own compute and a network between them, would do."
)


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="bench", help="folder for bench.json, bench.png and the trace")
    parser.add_argument("--batch-size", type=int, default=7, help="batch size of the traced and scanned transitions")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--samples", type=int, default=SAMPLES, help="warm samples per variant")
    parser.add_argument("--rows", type=int, nargs="*", default=list(GRID_ROWS), help="row counts of the scaling grid")
    parser.add_argument("--checkout", default=".", help=f"folder holding {RUN_WALL} and {TEST_WALL} (default: cwd)")


def main(args) -> int:
    from shardlab import outdir
    from shardlab.core.errors import OutputFolderError

    try:
        with outdir.writing(args.out, "bench") as staging:  # writes only inside OUT, replaces only its own files
            result = run(staging, args.batch_size, args.seed, args.samples, tuple(args.rows), args.checkout)
    except OutputFolderError as exc:
        print(f"[shardlab bench] {exc}", file=sys.stderr)
        return 1
    print(markdown_table(Path(args.out) / "bench.json"))
    print()
    print(scaling_table(Path(args.out) / "bench.json"))
    met = sum(t["met"] for t in result["targets"].values())
    print(
        f"\n[shardlab] {met}/{len(result['targets'])} targets met; bench took {result['elapsed_s']:.0f} s; "
        f"wrote {Path(args.out) / 'bench.json'} and bench.png"
    )
    return 0
