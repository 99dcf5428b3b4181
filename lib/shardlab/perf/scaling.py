"""The scaling grid: the full-batch compiled step per (rows, W) logical devices, measured side by side."""

from shardlab.core import fixtures
from shardlab.core.batch import place
from shardlab.core.devices import make_mesh
from shardlab.core.state import replicate
from shardlab.core.update import make_step
from shardlab.evidence import timing

GRID_ROWS = (1024, 4096, 16384, 65536, 262144)
WIDTH = 64
DEVICES = (1, 2, 4)
GRID_SAMPLES = 11
WARMUP = 3
NOTE = (
    "W logical devices share the same cores and memory in one process: efficiency below 1 here is the cost of "
    "splitting work into W programs plus the all-reduce between them on hardware that does not grow with W; "
    "it cannot show what W real devices or hosts, each with its own compute and a network between them, would do."
)


def _placed(host: dict, mesh) -> tuple:
    """The step's five arguments from `timing.inputs`, placed on `mesh`."""
    batch = place(host["features"], host["targets"], host["mask"], mesh)
    return (*batch, replicate(host["weights"], mesh), replicate(host["momentum"], mesh))


def grid(rows_grid=GRID_ROWS, devices=DEVICES, samples=GRID_SAMPLES, seed=fixtures.TIMING_SEED) -> dict:
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
