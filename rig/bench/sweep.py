"""The sweep that tests the cost model: batch size x feature width, every loop measured side by side.

Each cell's fixture is made like the timing fixture (`fixtures.synthetic(1023, d, TIMING_SEED)`;
d = 64 *is* the timing fixture). The course's learning rate diverges on wide features at
small batches (0.03 x |x|^2 grows with d), so every loop of a cell, the course loop
included, uses `learning_rate(d) = min(0.03, 0.5 / d)`: the same arithmetic per step, and
losses that stay finite over the three epochs the gate replays. Per cell: the cost model's
pick (from B, d, D, K and this host's measured constants), the measured fastest exact
four-device loop, and the ratio of the two; a hit is a pick within `HIT` of the fastest.
"""

from rig.bench import calibrate
from shardlab.core import fixtures
from shardlab.core.config import LEARNING_RATE
from shardlab.core.sampler import epoch_batches
from shardlab.perf import costmodel, device_sampler, endtoend

BATCH_SIZES = (7, 64, 1023)
WIDTHS = (8, 64, 256)
ROWS = 1023
STABLE = 0.5  # learning rate x width kept at or below this
HIT = 1.10  # the pick is a hit if its median is within 10 % of the fastest
SAMPLES = 9
GATE_EPOCHS = 3
LOOPS = (
    "course_loop",
    "fused_psum",
    "fused_stats",
    "fused_stats_sym",
    "fused_inputs",
    "no_collective",
    "floor_1dev",
    "floor_1dev_psum",
)
BOUNDARY_WIDTH = 64  # the row of the sweep where every program is also timed alone (the host boundary)


def loop_name(variant: str) -> str:
    """The four-device loop that runs `variant`."""
    return next(name for name, (v, devices) in endtoend.LOOPS.items() if v == variant and devices == 4)


def fixture(width: int):
    """The sweep's dataset of `width` features, drawn like the timing fixture."""
    return fixtures.synthetic(ROWS, width, fixtures.TIMING_SEED)


def learning_rate(width: int) -> float:
    """The course's learning rate, or less where it would diverge at this width."""
    return min(LEARNING_RATE, STABLE / width)


def names(width: int, pick_loop: str) -> tuple:
    """The loops of one cell: every loop, and at `BOUNDARY_WIDTH` the programs alone as well."""
    if width != BOUNDARY_WIDTH:
        return LOOPS
    alone = dict.fromkeys((pick_loop, "fused_stats", "floor_1dev"))
    return LOOPS + tuple(endtoend.PROGRAM + name for name in alone)


def cell(mesh, batch_size, width, steps, samples, seed, costs) -> dict:
    """Gate over three epochs, measure side by side, and score the model's pick against the fastest."""
    data = fixture(width)
    slots = device_sampler.slot_count(batch_size, ROWS, mesh.size)
    choice = costmodel.choose(batch_size, width, mesh.size, steps, slots, costs)
    pick = loop_name(choice.pick)
    gate_steps = GATE_EPOCHS * len(epoch_batches(ROWS, batch_size))
    found = endtoend.batch(
        data, mesh, batch_size, steps, samples, seed, names(width, pick), gate_steps, learning_rate=learning_rate(width)
    )
    medians = found["median_per_step_ms"]
    fastest = min(endtoend.FOUR_DEVICE_FUSED, key=medians.get)
    return {
        **found,
        "width": width,
        "learning_rate": learning_rate(width),
        "model": {"pick": choice.pick, "printed": str(choice), "table": choice.table},
        "pick_loop": pick,
        "fastest_loop": fastest,
        "pick_over_fastest": medians[pick] / medians[fastest],
        "hit": medians[pick] <= HIT * medians[fastest],
    }


def run(mesh, steps=endtoend.STEPS, samples=SAMPLES, seed=17, widths=WIDTHS, batch_sizes=BATCH_SIZES, progress=print):
    """Calibrate the model's constants, then every cell; returns the cells and the hit count."""
    costs = calibrate.calibrate(mesh, steps)
    cells = {}
    for width in widths:
        for batch_size in batch_sizes:
            cells[f"d{width}_b{batch_size}"] = found = cell(mesh, batch_size, width, steps, samples, seed, costs)
            progress(found["model"]["printed"])
            progress(f"  measured fastest: {found['fastest_loop']}; pick / fastest = {found['pick_over_fastest']:.3f}")
    hits = sum(c["hit"] for c in cells.values())
    return {"costs": costs, "cells": cells, "hits": hits, "count": len(cells), "hit_within": HIT}


def row(sweep: dict, width: int = BOUNDARY_WIDTH) -> dict:
    """The cells of one width keyed like the end-to-end section (b7, b64, b1023)."""
    return {f"b{c['batch_size']}": c for c in sweep["cells"].values() if c["width"] == width}
