"""Which collective a dispatch should use: floats moved, collectives and arithmetic as functions of B, d, D, K.

One table (`VARIANTS`) drives the loop, the bench, the tests and the docs. Every variant is
data-parallel: a device computes only from the slots it owns (its `P('data')` block of each
batch, read from its copy of the dataset) or from what a collective hands it.

| variant | collective per dispatch | floats in it | where the data lives |
| --- | --- | --- | --- |
| `per_step` | K all-reduces | K (d + 2) | dataset replicated; each device reads only its block of slots |
| `stats` | 1 all-reduce | K (d^2 + d + 2) | same; a least-squares shortcut (statistics of fixed size) |
| `stats_sym` | 1 all-reduce | K (d(d+1)/2 + d + 2) | same, only A's upper triangle moves |
| `inputs` | 1 all-gather | K S (d + 1) | same; afterwards every device holds every step's batch |
| `no_collective` | none | 0 | a bound with wrong numbers, never picked |

S is the padded batch (`device_sampler.slot_count`). A real input pipeline would not copy the
dataset to every device: each host would read (or receive from a loader) only its own rows,
as the bench's resident variant (rig/bench/resident.py) shards them by row. Nothing in the
exchange changes: `inputs` still moves exactly the slots each device owns, and the others
still reduce only local sums.

The model: time per dispatch = alpha x collectives + beta x floats (an all-gather's own beta)
+ gamma x batched flops per device + delta x floats each device reads inside the step loop
(small operations one step at a time cost far more per float than one batched matmul).
The constants are this host's, measured by the bench (rig/bench/calibrate.py) with
tiny programs that are none of the variants (`DEFAULT_COSTS` holds one such measurement);
`choose` returns every variant's inputs and prediction and the cheapest exact one.
"""

import time
from typing import NamedTuple

import jax
import numpy as np

from shardlab.errors import ConfigError
from shardlab.perf import inputs, stats, steps


class Variant(NamedTuple):
    body: object
    collective: str  # "all-reduce", "all-gather" or "none"
    exact: bool  # right numbers (the course update) or a bound only
    general: bool  # works for any loss, not only least squares
    floats: object  # (S, d, K) -> floats in the collective buffers of one dispatch
    collectives: object  # K -> collectives per dispatch
    flops: object  # (S, d, D) -> flops per device per step in batched work (outside the step loop)
    scanned: object  # (S, d, D) -> floats each device reads per step inside the step loop


VARIANTS = {
    "per_step": Variant(
        steps.per_step_body,
        "all-reduce",
        True,
        True,
        lambda S, d, K: K * (d + 2),
        lambda K: K,
        lambda S, d, D: 0,
        lambda S, d, D: (S // D) * d,
    ),
    "stats": Variant(
        stats.body,
        "all-reduce",
        True,
        False,
        lambda S, d, K: K * (d * d + d + 2),
        lambda K: 1,
        lambda S, d, D: 2 * (S // D) * d * d,
        lambda S, d, D: d * d,
    ),
    "stats_sym": Variant(
        stats.symmetric_body,
        "all-reduce",
        True,
        False,
        lambda S, d, K: K * (stats.packed_width(d) + d + 2),
        lambda K: 1,
        lambda S, d, D: 2 * (S // D) * d * d + 2 * d * d,
        lambda S, d, D: d * d,
    ),
    "inputs": Variant(
        inputs.body,
        "all-gather",
        True,
        True,
        lambda S, d, K: K * S * (d + 1),
        lambda K: 1,
        lambda S, d, D: 0,
        lambda S, d, D: S * d,
    ),
    "no_collective": Variant(
        steps.no_collective_body,
        "none",
        False,
        True,
        lambda S, d, K: 0,
        lambda K: 0,
        lambda S, d, D: 0,
        lambda S, d, D: (S // D) * d,
    ),
}
AUTO = "auto"
# us per collective, us per float (all-reduce, all-gather), us per flop: the bench's `calibrate()` on the 2-core host
DEFAULT_COSTS = {
    "alpha_us": 38.0,
    "beta_reduce_us": 8.7e-3,
    "beta_gather_us": 3.4e-3,
    "gamma_us": 4.8e-5,
    "step_float_us": 1e-3,
}


def body_of(variant: str):
    """The per-device program of a variant name; ConfigError naming the choices otherwise."""
    if variant not in VARIANTS:
        raise ConfigError(f"unknown fused variant {variant!r}; choose one of {sorted(VARIANTS)} or {AUTO!r}")
    return VARIANTS[variant].body


def inputs_of(variant: str, slots: int, width: int, devices: int, k: int) -> dict:
    """Collectives, floats moved and flops per device of one dispatch of `variant`."""
    v = VARIANTS[variant]
    return {
        "collective": v.collective,
        "collectives": v.collectives(k),
        "floats": v.floats(slots, width, k),
        "flops_per_device": k * v.flops(slots, width, devices),
        "step_floats_per_device": k * v.scanned(slots, width, devices),
    }


def predict(found: dict, costs: dict) -> float:
    """Predicted us per dispatch of a variant's `inputs_of` under `costs`."""
    beta = costs["beta_gather_us"] if found["collective"] == "all-gather" else costs["beta_reduce_us"]
    moved = costs["alpha_us"] * found["collectives"] + beta * found["floats"]
    return (
        moved + costs["gamma_us"] * found["flops_per_device"] + costs["step_float_us"] * found["step_floats_per_device"]
    )


class Choice(NamedTuple):
    pick: str
    batch_size: int
    slots: int
    width: int
    devices: int
    k: int
    costs: dict
    table: dict  # variant -> inputs_of + predicted_us

    def __str__(self) -> str:
        head = f"cost model: B={self.batch_size} (S={self.slots} slots) d={self.width} D={self.devices} K={self.k}"
        rows = [
            f"  {name:<13} {row['collectives']:>4} {row['collective']:<10} {row['floats']:>10,} floats "
            f"{row['flops_per_device']:>12,} flops {row['step_floats_per_device']:>10,} step reads -> "
            f"{row['predicted_us']:>9.0f} us"
            for name, row in self.table.items()
        ]
        return "\n".join([head, *rows, f"  pick: {self.pick} (cheapest exact variant; no_collective is a bound)"])


def choose(batch_size: int, width: int, devices: int, k: int, slots: int, costs=None) -> Choice:
    """The cheapest exact variant by the model."""
    costs = {**DEFAULT_COSTS, **(costs or {})}
    table = {}
    for name in VARIANTS:
        found = inputs_of(name, slots, width, devices, k)
        table[name] = {**found, "predicted_us": predict(found, costs)}
    pick = min((n for n, v in VARIANTS.items() if v.exact), key=lambda n: table[n]["predicted_us"])
    return Choice(pick, batch_size, slots, width, devices, k, costs, table)


def warm_seconds(fn, args, samples: int, statistic=np.median) -> float:
    """`statistic` (median by default) of `samples` warm, blocked calls of `fn(*args)`, in seconds."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(samples):
        began = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - began)
    return float(statistic(times))
