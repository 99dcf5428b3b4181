"""Scaling: the full-batch compiled step per W logical devices, measured side by side, and a model to fit.

`weak` gives every device the same rows (the setting of the distributed-checkpoint chapter's
all-reduce lab; the bench's strong scaling, rig/bench/strong.py, keeps the rows fixed as W grows).
Both report efficiency = throughput_W / (W * throughput_1), throughput in rows per second.

The chapter's model of one data-parallel step on W workers, in ms:

    T(W) = compute + 2(W-1) * ring_latency + 2(W-1)/W * ring_bandwidth + straggler * log2(W)

Assumptions: each worker's local compute is fixed (weak scaling); the gradient is summed by a ring
all-reduce (2(W-1) steps, each paying a latency and moving 1/W of the payload); the slowest of W
workers costs a penalty that grows with log2(W). `fit` finds the terms by least squares.
"""

import numpy as np

from shardlab.core import fixtures
from shardlab.core.batch import place
from shardlab.core.devices import make_mesh
from shardlab.core.state import replicate
from shardlab.core.update import make_step
from shardlab.errors import ConfigError
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


TERMS = ("compute", "ring_latency", "ring_bandwidth", "straggler")
# The chapter's lab table: ms per step for W workers, 120 ms of local compute.
CHAPTER_MS = {1: 120.3, 2: 125.7, 4: 131.4, 8: 137.8, 16: 145.6}


def design(workers) -> np.ndarray:
    """One row per W: the multiplier of each of TERMS in T(W)."""
    w = np.asarray(workers, np.float64)
    return np.stack([np.ones_like(w), 2 * (w - 1), 2 * (w - 1) / w, np.log2(w)], axis=1)


def fit(step_ms: dict, terms=TERMS) -> dict:
    """Least-squares values (ms) of `terms` (the others held at 0) from {W: ms per step}; plus the residuals."""
    workers = sorted(step_ms)
    columns = [TERMS.index(t) for t in terms]
    a, b = design(workers)[:, columns], np.array([step_ms[w] for w in workers], np.float64)
    if np.linalg.matrix_rank(a) < len(terms):
        raise ConfigError(f"{len(workers)} worker counts {workers} cannot determine the {len(terms)} terms {terms}")
    solution = np.linalg.lstsq(a, b, rcond=None)[0]
    params = {t: 0.0 for t in TERMS} | dict(zip(terms, map(float, solution)))
    return {"params": params, "residual_ms": dict(zip(workers, map(float, a @ solution - b)))}


def predict(params: dict, workers) -> dict:
    """{W: (ms per step, speedup W*T(1)/T(W), efficiency T(1)/T(W))} under the model with `params`."""
    ms = design(workers) @ np.array([params[t] for t in TERMS])
    one = params["compute"]
    return {
        int(w): {"ms": float(m), "speedup": float(w * one / m), "efficiency": float(one / m)}
        for w, m in zip(workers, ms)
    }


HELD_OUT = ("compute", "straggler")  # the two terms fitted through W = 1 and 2, then tested at W = 4


def held_out(table: list[dict], terms=HELD_OUT) -> dict:
    """The fit of `terms` through W = 1 and 2 of `weak`'s table, its prediction at W = 4 beside the measurement.

    The prediction is also made from every pair of middle-half ends at W = 1 and 2, so its range says how far
    the spread alone could move it; a measured middle half outside that whole range refutes the fit.
    """
    measured = {r["devices"]: r["median_ms"] for r in table}
    middle = {r["devices"]: middle_half(r["samples_ms"]) for r in table}
    if not {1, 2, 4} <= set(measured):
        raise ConfigError(f"the held-out fit needs W = 1, 2 and 4 in the table, not {sorted(measured)}")
    fitted = fit({w: measured[w] for w in (1, 2)}, terms)
    corners = [predict(fit({1: t1, 2: t2}, terms)["params"], [4])[4]["ms"] for t1 in middle[1] for t2 in middle[2]]
    return {
        **fitted,
        "predicted_ms_at_4": predict(fitted["params"], [4])[4]["ms"],
        "predicted_range_ms_at_4": [min(corners), max(corners)],
        "measured_ms_at_4": measured[4],
        "measured_middle_half_ms_at_4": middle[4],
    }
