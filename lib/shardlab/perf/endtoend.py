"""End to end, per step: the course loop against the fused loops and the one-device floor, side by side.

A sample is `steps` complete transitions from the same starting state, from the course
state in to the course state out (sampling, placement, the update, losses and IDs back on
the host), divided by `steps`. Variants:

- `course_loop`: `sl.transition` in a Python loop, four devices (three `psum`s per step);
- `fused_psum`: `fused.FusedLoop`, one dispatch of `steps` steps, one packed `psum` per step;
- `fused_stats`: the same with one collective for all steps (`perf.stats`);
- `floor_1dev`: `fused_psum` on a one-device mesh: the arithmetic and the sampler, no collective.

Every variant is first checked against the course loop (IDs bit for bit, losses to
float32 tolerance) and then measured in rotating order, every sample kept.
"""

import time

import jax
import numpy as np

from shardlab.core.config import SEED
from shardlab.core.devices import make_mesh
from shardlab.core.state import initial, transition
from shardlab.core.update import make_step
from shardlab.errors import VariantMismatchError
from shardlab.evidence.timing import rotations
from shardlab.perf import fused, stats

VARIANTS = ("course_loop", "fused_psum", "fused_stats", "floor_1dev")
FOUR_DEVICE_FUSED = ("fused_psum", "fused_stats")
STEPS = 100  # transitions per sample
SAMPLES = 15
# The gate before the clock: |loss - course loss| <= GATE * (|course loss| + mean(targets^2)). The second
# term is the scale at which the statistics loop's w.A.w - 2 w.b + c cancels (see perf.stats).
GATE = 1e-4


def course_loop(data, mesh, batch_size: int):
    """f(state, steps) -> (state, losses, ids) with `sl.transition` in a Python loop."""
    step = make_step(mesh)

    def run(state, steps):
        losses, ids = [], []
        for _ in range(steps):
            state, loss, batch_ids = transition(state, data, batch_size, step, mesh)
            losses.append(loss)
            ids.append(batch_ids)
        return state, np.asarray(losses, np.float32), ids

    return run


def programs(data, mesh, batch_size: int, steps: int = STEPS, seed: int = SEED) -> dict:
    """Variant -> (run(state, steps), starting state from `seed`); the fused ones compiled for `steps` per dispatch."""
    single = make_mesh(1)
    loops = {
        "fused_psum": (fused.FusedLoop(data, mesh, batch_size, steps), mesh),
        "fused_stats": (fused.FusedLoop(data, mesh, batch_size, steps, body=stats.body), mesh),
        "floor_1dev": (fused.FusedLoop(data, single, batch_size, steps), single),
    }
    found = {"course_loop": (course_loop(data, mesh, batch_size), initial(seed, data, mesh))}
    for name, (loop, where) in loops.items():
        found[name] = (loop.run, initial(seed, data, where))
    return found


def gate(found: dict, data, steps: int) -> dict:
    """Max scaled loss difference from the course loop per variant; VariantMismatchError if IDs or losses differ."""
    _, want, want_ids = found["course_loop"][0](found["course_loop"][1], steps)
    scale = np.abs(want) + float(np.mean(np.square(data.targets, dtype=np.float64)))
    errors = {}
    for name, (run, start) in found.items():
        state, losses, ids = run(start, steps)
        if len(ids) != len(want_ids) or any(not np.array_equal(a, b) for a, b in zip(ids, want_ids)):
            raise VariantMismatchError(f"{name}: sample IDs differ from the course loop; nothing was timed")
        errors[name] = float(np.max(np.abs(losses - want) / scale))
        if not errors[name] <= GATE:
            raise VariantMismatchError(
                f"{name}: losses differ from the course loop by {errors[name]:.3g} of |loss| + mean(y^2) "
                f"(allowed {GATE}); "
                "nothing was timed. Fix the loop before measuring it."
            )
    return errors


def measure(found: dict, steps: int, samples: int, clock=time.perf_counter) -> dict:
    """Per-step ms of every sample, variants in rotating order; each sample starts from the same state."""
    per_step = {name: [] for name in found}
    order = rotations(found, samples)
    for run, start in found.values():  # warm: compiled and called once before any clock
        jax.block_until_ready(run(start, steps)[0]["weights"])
    for names in order:
        for name in names:
            run, start = found[name]
            began = clock()
            state, _, _ = run(start, steps)
            jax.block_until_ready(state["weights"])
            per_step[name].append(1e3 * (clock() - began) / steps)
    return {"per_step_ms": per_step, "order": order}


def batch(data, mesh, batch_size: int, steps: int = STEPS, samples: int = SAMPLES, seed: int = SEED) -> dict:
    """Gate, then measure one batch size; medians and the ratios the targets use."""
    found = programs(data, mesh, batch_size, steps, seed)
    errors = gate(found, data, steps)
    measured = measure(found, steps, samples)
    medians = {name: float(np.median(v)) for name, v in measured["per_step_ms"].items()}
    best = min(FOUR_DEVICE_FUSED, key=medians.get)
    return {
        "batch_size": batch_size,
        "seed": seed,
        "steps_per_sample": steps,
        **measured,
        "median_per_step_ms": medians,
        "max_scaled_loss_error_vs_course": errors,
        "best_4dev_fused": best,
        "speedup_over_course": {name: medians["course_loop"] / medians[name] for name in medians},
        "best_fused_over_floor": medians[best] / medians["floor_1dev"],
    }


def run(data, mesh, batch_sizes=(7, 64, 1023), steps: int = STEPS, samples: int = SAMPLES, seed: int = SEED) -> dict:
    """Every batch size in turn, each measured side by side."""
    return {f"b{b}": batch(data, mesh, b, steps, samples, seed) for b in batch_sizes}
