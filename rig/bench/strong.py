"""Strong scaling for bench.json: the rows fixed as W grows, the full-batch step per (rows, W).

The same measurement as `shardlab.perf.scaling.weak` (stage 5b), which gives every device the same rows
instead; both report efficiency = throughput_W / (W * throughput_1), throughput in rows per second.
"""

from shardlab.core import fixtures
from shardlab.core.devices import make_mesh
from shardlab.core.update import make_step
from shardlab.evidence import timing
from shardlab.perf import scaling

GRID_ROWS = (1024, 4096, 16384, 65536, 262144)
NOTE = (
    "W logical devices share the same cores and memory in one process: efficiency below 1 here is the cost of "
    "splitting work into W programs plus the all-reduce between them on hardware that does not grow with W; "
    "it cannot show what W real devices or hosts, each with its own compute and a network between them, would do."
)


def grid(rows_grid=GRID_ROWS, devices=scaling.DEVICES, samples=scaling.GRID_SAMPLES, seed=fixtures.TIMING_SEED) -> dict:
    """Full-batch compiled step per (rows, W) on meshes over the first W devices; the W alternate.

    Efficiency = throughput_W / (W * throughput_1), throughput in rows per second.
    """
    table = []
    for rows in rows_grid:
        data = fixtures.synthetic(rows, scaling.WIDTH, seed)
        host = timing.inputs(data, make_mesh(max(devices)))
        variants = {
            f"w{w}": timing.compile_variant(make_step(make_mesh(w)), scaling.placed(host, make_mesh(w)))
            for w in devices
        }
        timing.check(variants, host, rtol=1e-3, atol=1e-3)
        measured = timing.summary(variants, timing.measure(variants, samples, scaling.WARMUP))
        table += scaling.efficiency_rows(measured, {w: rows for w in devices})
        del variants, host, data
    return {"width": scaling.WIDTH, "table": table}
