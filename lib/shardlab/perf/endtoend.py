"""End to end, per step: the course loop against the fused loops and both floors, side by side.

A sample is `steps` complete transitions from the same starting state, from the course
state in to the course state out (sampling, placement, the update, losses and IDs back on
the host), divided by `steps`. The loops (`LOOPS`: name -> fused variant and device count):

- `course_loop`: `sl.transition` in a Python loop, four devices (three `psum`s per step);
- `fused_psum`, `fused_stats`: one packed `psum` per step / one statistics `psum` per dispatch;
- `fused_stats_sym`, `fused_inputs`: statistics with A's upper triangle only / one all-gather
  of every device's slots for all K steps (`perf.costmodel` says which is cheaper where);
- `no_collective`: the data-parallel loop with its collective removed: wrong numbers, a bound;
- `floor_1dev`: one device doing the whole batch (right numbers, no parallelism), with no
  collective in its program; `floor_1dev_psum` is the same loop with the packed `psum` left
  in (a no-op over one device, but its packing and unpacking still run);
- `program:<loop>`: that loop's compiled program alone on placed arguments (the host boundary
  is the difference to the loop itself).

Every loop is first checked against the course loop (IDs bit for bit, losses to the gate's
tolerance; `no_collective` IDs only) and then measured in blocks (`measure`): a warm call and a
few samples of one loop at a time, its buffers freed after, the blocks in rotating order;
every sample is kept.
"""

import gc
import time

import jax
import numpy as np

from shardlab.core.config import SEED
from shardlab.core.devices import make_mesh
from shardlab.core.state import initial, transition
from shardlab.core.update import make_step
from shardlab.errors import VariantMismatchError
from shardlab.evidence.timing import rotations
from shardlab.perf import fused

LOOPS = {  # name -> (costmodel variant, devices); course_loop is the control
    "fused_psum": ("per_step", 4),
    "fused_stats": ("stats", 4),
    "fused_stats_sym": ("stats_sym", 4),
    "fused_inputs": ("inputs", 4),
    "no_collective": ("no_collective", 4),
    "floor_1dev": ("no_collective", 1),
    "floor_1dev_psum": ("per_step", 1),
}
VARIANTS = ("course_loop", "fused_psum", "fused_stats", "floor_1dev")  # the loops measured before the sweep
FOUR_DEVICE_FUSED = ("fused_psum", "fused_stats", "fused_stats_sym", "fused_inputs")
WRONG_NUMBERS = ("no_collective",)  # gated on IDs only
PROGRAM = "program:"
STEPS = 100  # transitions per sample
SAMPLES = 15
BLOCK = 3  # timed samples of one loop in a row (after one warm call), at least
BLOCK_S = 0.05  # and more samples while a block has run for less than this many seconds
MOST_PER_BLOCK = 40
# The gate before the clock: |loss - course loss| <= GATE * (|course loss| + mean(targets^2)). The second
# term is the scale at which the statistics loop's w.A.w - 2 w.b + c cancels (see perf.stats).
GATE = 1e-4


def course_loop(data, mesh, batch_size: int, **hyper):
    """f(state, steps) -> (state, losses, ids) with `sl.transition` in a Python loop."""
    step = make_step(mesh, **hyper)

    def run(state, steps):
        losses, ids = [], []
        for _ in range(steps):
            state, loss, batch_ids = transition(state, data, batch_size, step, mesh)
            losses.append(loss)
            ids.append(batch_ids)
        return state, np.asarray(losses, np.float32), ids

    return run


def _program(loop, start, steps: int):
    """f(state, steps) -> (state,) calling only the compiled program on arguments placed once from `start`."""
    args = loop.arguments(start, steps)

    def run(state, steps):
        return ({"weights": loop.program(*args)[3]},)

    return run


def programs(data, mesh, batch_size, steps=STEPS, seed=SEED, names=VARIANTS, **hyper) -> dict:
    """Name -> (run(state, steps), starting state from `seed`); fused loops compiled for `steps` per dispatch.

    `names` are `course_loop`, keys of `LOOPS` or `program:<key>`; `hyper` goes to every loop.
    """
    found = {}
    for name in names:
        if name == "course_loop":
            found[name] = (course_loop(data, mesh, batch_size, **hyper), initial(seed, data, mesh))
            continue
        variant, devices = LOOPS[name.removeprefix(PROGRAM)]
        where = mesh if devices == mesh.size else make_mesh(devices)
        loop, start = (
            fused.FusedLoop(data, where, batch_size, steps, variant=variant, **hyper),
            initial(seed, data, where),
        )
        found[name] = (_program(loop, start, steps), start) if name.startswith(PROGRAM) else (loop.run, start)
    return found


def gate(found: dict, data, steps: int) -> dict:
    """Max scaled loss difference from the course loop per loop; VariantMismatchError if IDs or losses differ.

    `program:` entries return no IDs or losses: their loop's own entry is gated.
    """
    _, want, want_ids = found["course_loop"][0](found["course_loop"][1], steps)
    scale = np.abs(want) + float(np.mean(np.square(data.targets, dtype=np.float64)))
    errors = {}
    for name, (run, start) in found.items():
        if name.startswith(PROGRAM):
            continue
        state, losses, ids = run(start, steps)
        if len(ids) != len(want_ids) or any(not np.array_equal(a, b) for a, b in zip(ids, want_ids)):
            raise VariantMismatchError(f"{name}: sample IDs differ from the course loop; nothing was timed")
        if name in WRONG_NUMBERS:
            continue
        errors[name] = float(np.max(np.abs(losses - want) / scale))
        if not errors[name] <= GATE:
            raise VariantMismatchError(
                f"{name}: losses differ from the course loop by {errors[name]:.3g} of |loss| + mean(y^2) "
                f"(allowed {GATE}); nothing was timed. Fix the loop before measuring it."
            )
    return errors


def _block(run, start, steps: int, count: int, clock, least_s: float) -> list:
    """One loop's block: an untimed warm call, then timed samples; its buffers freed before it returns.

    At least `count` samples, and more while the block has run for less than `least_s` (at most
    `MOST_PER_BLOCK`): a loop of 2 ms a sample gets enough of them that one slice of another
    process's time on the cores moves its median little.
    """
    jax.block_until_ready(run(start, steps)[0]["weights"])
    found, began_block = [], clock()
    while len(found) < count or (clock() - began_block < least_s and len(found) < MOST_PER_BLOCK):
        began = clock()
        out = run(start, steps)
        jax.block_until_ready(out[0]["weights"])
        found.append(1e3 * (clock() - began) / steps)
        del out
    gc.collect()
    return found


def measure(found: dict, steps: int, samples: int, clock=time.perf_counter, block=BLOCK, least_s=BLOCK_S) -> dict:
    """Per-step ms of every sample: each loop in blocks of its own, the blocks of a round in rotating order.

    A block is one warm call and at least `block` timed samples of one loop (`_block`), so no
    sample follows another loop's call directly (a loop with large buffers slows the samples
    after it); the rounds interleave the loops, so slow phases of the machine reach all of
    them. Every loop gets at least `samples` samples; every sample is kept, and `blocks` holds
    the length of each of a loop's blocks in order.
    """
    per_step, blocks = {name: [] for name in found}, {name: [] for name in found}
    order = rotations(found, -(-samples // block))
    for index, names in enumerate(order):
        count = min(block, samples - index * block)
        for name in names:
            got = _block(*found[name], steps, count, clock, least_s)
            per_step[name] += got
            blocks[name].append(len(got))
    return {"per_step_ms": per_step, "order": order, "blocks": blocks}


def batch(data, mesh, batch_size, steps=STEPS, samples=SAMPLES, seed=SEED, names=VARIANTS, gate_steps=None, **hyper):
    """Gate (over `gate_steps`, default `steps`), then measure one batch size; medians and ratios."""
    found = programs(data, mesh, batch_size, steps, seed, names, **hyper)
    errors = gate(found, data, gate_steps or steps)
    measured = measure(found, steps, samples)
    medians = {name: float(np.median(v)) for name, v in measured["per_step_ms"].items()}
    best = min((n for n in FOUR_DEVICE_FUSED if n in medians), key=medians.get)
    result = {
        "batch_size": batch_size,
        "seed": seed,
        "steps_per_sample": steps,
        "gate_steps": gate_steps or steps,
        **measured,
        "median_per_step_ms": medians,
        "max_scaled_loss_error_vs_course": errors,
        "best_4dev_fused": best,
        "speedup_over_course": {name: medians["course_loop"] / medians[name] for name in medians},
    }
    for floor in ("floor_1dev", "no_collective"):
        if floor in medians:
            result[f"over_{floor}"] = {name: medians[name] / medians[floor] for name in medians}
    result["best_fused_over_floor"] = result.get("over_floor_1dev", {}).get(best)
    return result


def run(data, mesh, batch_sizes=(7, 64, 1023), steps: int = STEPS, samples: int = SAMPLES, seed: int = SEED) -> dict:
    """Every batch size in turn, each measured side by side."""
    return {f"b{b}": batch(data, mesh, b, steps, samples, seed) for b in batch_sizes}
