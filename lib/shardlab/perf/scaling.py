"""Scaling: the full-batch compiled step per W logical devices, measured side by side.

`weak` gives every device the same rows (the setting of the distributed-checkpoint chapter's
all-reduce lab; the bench's strong scaling, rig/bench/strong.py, keeps the rows fixed as W grows).
Both report efficiency = throughput_W / (W * throughput_1), throughput in rows per second.
"""

from shardlab.core import fixtures
from shardlab.core.batch import place
from shardlab.core.devices import make_mesh
from shardlab.core.state import replicate
from shardlab.core.update import make_step
from shardlab.evidence import timing

WIDTH = 64
DEVICES = (1, 2, 4)
GRID_SAMPLES = 11
WARMUP = 3


def placed(host: dict, mesh) -> tuple:
    """The step's five arguments from `timing.inputs`, placed on `mesh`."""
    batch = place(host["features"], host["targets"], host["mask"], mesh)
    return (*batch, replicate(host["weights"], mesh), replicate(host["momentum"], mesh))


def middle_half(samples_ms) -> list[float]:
    """[25th, 75th percentile] of `samples_ms`, from `timing.spread`."""
    side = timing.spread(samples_ms)
    return [side["q1_ms"], side["q3_ms"]]


def efficiency_rows(measured: dict, rows: dict) -> list[dict]:
    """One row per W: timing, rows per second and efficiency against W = 1 (rows[w]: rows in W's step), each with
    its range over the middle halves (the efficiency's from the far ends of W's and W = 1's, so it is the widest)."""
    throughput = {w: rows[w] / measured[f"w{w}"]["median_ms"] * 1e3 for w in rows}
    spread, half = {}, {}  # rows per second over the middle half of the step times, and that middle half
    for w in rows:
        q1, q3 = half[w] = middle_half(measured[f"w{w}"]["samples_ms"])
        spread[w] = [rows[w] / q3 * 1e3, rows[w] / q1 * 1e3]
    keys = ("median_ms", "samples_ms", "compile_ms")
    table = []
    for w in rows:
        table.append(
            {
                "rows": rows[w],
                "devices": w,
                **{k: measured[f"w{w}"][k] for k in keys},
                "middle_half_ms": half[w],
                "rows_per_s": throughput[w],
                "rows_per_s_middle_half": spread[w],
                "efficiency": throughput[w] / (w * throughput[1]),
                "efficiency_range": [spread[w][0] / (w * spread[1][1]), spread[w][1] / (w * spread[1][0])],
            }
        )
    return table


def weak(rows_per_device: int = 16384, devices=DEVICES, samples=GRID_SAMPLES, seed=fixtures.TIMING_SEED) -> dict:
    """Every one of W logical devices holds `rows_per_device` rows; the W alternate, every sample kept."""
    variants = {}
    for w in devices:
        host = timing.inputs(fixtures.synthetic(rows_per_device * w, WIDTH, seed), make_mesh(w))
        variants[f"w{w}"] = timing.compile_variant(make_step(make_mesh(w)), placed(host, make_mesh(w)))
        timing.check({f"w{w}": variants[f"w{w}"]}, host, rtol=1e-3, atol=1e-3)
    measured = timing.summary(variants, timing.measure(variants, samples, WARMUP, progress=None))
    rows = {w: rows_per_device * w for w in devices}
    return {"width": WIDTH, "rows_per_device": rows_per_device, "table": efficiency_rows(measured, rows)}
