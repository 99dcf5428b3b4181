"""The roofline of one step: XLA's FLOP and byte counts for the program against the measured time.

`compiled.cost_analysis()` is XLA's static cost model of an executable: it counts the
operations of the program once (a `while` body is counted once, whatever its trip count),
so the fused loop's one step is costed from its program compiled with K = 1 (which also
holds the sampler's possible reshuffle). Its byte count is the model's (for a gather it
counts the whole operand it reads from), not a measured memory traffic. The roofs are
measured here, on one logical device of this host: a large float32 matmul for FLOP/s and a
large elementwise pass for bytes/s. A step that takes far longer than both roofs allow is
bound by neither arithmetic nor memory but by fixed costs: dispatch, the thunks of many
tiny operations, synchronisation between device threads.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

from shardlab.core.batch import next_batch
from shardlab.core.config import SEED
from shardlab.core.state import initial
from shardlab.core.update import make_step
from shardlab.perf import fused
from shardlab.perf.costmodel import warm_seconds

SAMPLES = 5  # warm calls per roof, and of the course update timed without the profiler
MATMUL = 512  # n of the n x n x n float32 matmul that measures the FLOP roof
STREAM = (
    1 << 24
)  # float32 elements of the elementwise pass that measures the bandwidth roof (64 MB, beyond a CPU cache)


def cost(compiled) -> dict:
    """{'flops', 'bytes_accessed'} from an executable's cost analysis (a dict, or a list of one per program)."""
    found = compiled.cost_analysis()
    if isinstance(found, list | tuple):
        found = found[0]
    return {"flops": float(found.get("flops", 0.0)), "bytes_accessed": float(found.get("bytes accessed", 0.0))}


def _course_update(data, mesh, batch_size: int, seed: int):
    """The course's update compiled for one placed batch, and that batch with the initial weights and momentum."""
    state = initial(seed, data, mesh)
    _, batch = next_batch(state, data, batch_size, mesh)
    args = (*batch[:3], state["weights"], state["momentum"])
    return make_step(mesh).lower(*args).compile(), args


def course_step(data, mesh, batch_size: int, seed: int = SEED) -> dict:
    """Cost of the course's compiled update for one placed batch (sampling and placement are outside it)."""
    return cost(_course_update(data, mesh, batch_size, seed)[0])


def course_update_ms(data, mesh, batch_size: int, samples: int, seed: int = SEED) -> float:
    """Median ms of warm calls of the course's compiled update alone, each until its outputs are ready.

    The batch is placed before the clock: the time holds what `course_step` costs plus one dispatch and
    wait, so it sits beside a fused step (one dispatch of K steps over K) like for like.
    """
    compiled, args = _course_update(data, mesh, batch_size, seed)
    return 1e3 * warm_seconds(compiled, args, samples)


def fused_step(data, mesh, batch_size: int, body=None, seed: int = SEED) -> dict:
    """Cost of one fused step: the loop's program compiled for K = 1 (sampler, gather, update, collectives)."""
    loop = fused.FusedLoop(data, mesh, batch_size, 1, body=body)
    return cost(loop.program.lower(*loop.arguments(initial(seed, data, mesh), 1)).compile())


def roofs(samples: int = SAMPLES) -> dict:
    """Measured FLOP/s of a large matmul and bytes/s of a large elementwise pass, on one device.

    The elementwise pass donates its input, so each call overwrites the buffer it reads: a pass that
    wrote a fresh output every call would time the allocator and the first touch of new pages
    (several times slower here) rather than streaming through memory. The roofs are medians of
    `samples` warm calls; `gbytes_per_s_range` is the slowest and fastest sample's bandwidth, so a
    reader sees how much the host's load moved the memory roof while it was measured.
    """
    a = jnp.ones((MATMUL, MATMUL), jnp.float32)
    matmul = jax.jit(lambda x: x @ x)
    flop_s = 2 * MATMUL**3 / warm_seconds(matmul, (a,), samples)
    stream = jax.jit(lambda v: v * 1.5 + 1.0, donate_argnums=0)
    x = jax.block_until_ready(stream(jnp.ones(STREAM, jnp.float32)))  # compiled and warm
    pass_s = []
    for _ in range(samples):
        began = time.perf_counter()
        x = jax.block_until_ready(stream(x))
        pass_s.append(time.perf_counter() - began)
    moved = 2 * 4 * STREAM  # bytes: read once, write once
    return {
        "flops_per_s": flop_s,
        "bytes_per_s": moved / float(np.median(pass_s)),
        "gbytes_per_s": moved / float(np.median(pass_s)) / 1e9,
        "gbytes_per_s_range": [moved / max(pass_s) / 1e9, moved / min(pass_s) / 1e9],
        "stream_bytes": moved,
        "samples": samples,
        "measured_on": "one logical CPU device, XLA, float32",
    }


def point(step_cost: dict, step_ms: float, roof: dict) -> dict:
    """Where one step sits: the time each roof allows for its FLOPs and bytes, against the measured time.

    The roofline's time for a step is the larger of the two; `measured_over_roofline` says how
    many times longer the step really took. XLA's byte model counts an operand a gather reads
    from in full (here the whole dataset copy), so the byte time is an upper bound.
    """
    flop_ms = 1e3 * step_cost["flops"] / roof["flops_per_s"]
    byte_ms = 1e3 * step_cost["bytes_accessed"] / roof["bytes_per_s"]
    return {
        **step_cost,
        "step_ms": step_ms,
        "flops_per_byte": step_cost["flops"] / max(step_cost["bytes_accessed"], 1.0),
        "achieved_flops_per_s": step_cost["flops"] / (step_ms / 1e3),
        "flop_roof_ms": flop_ms,
        "byte_roof_ms": byte_ms,
        "roofline_ms": max(flop_ms, byte_ms),
        "measured_over_roofline": step_ms / max(flop_ms, byte_ms),
    }


DIGITS = {
    "course_update": 0,
    "course_loop": 0,
    "fused_psum": 2,
    "fused_stats": 2,
}  # decimals each step's measured/roofline ratio gets


def gap(points: dict) -> float:
    """How many times the course update's measured/roofline ratio is the larger of the two fused steps'."""
    fused_most = max(points["fused_psum"]["measured_over_roofline"], points["fused_stats"]["measured_over_roofline"])
    return points["course_update"]["measured_over_roofline"] / fused_most


def over_shared_roof(points: dict, devices: int) -> dict:
    """Each fused step's measured / roofline against a roof `devices` times lower: the devices share the cores
    one device's roofs were measured on, so their roof may be that much lower."""
    return {name: points[name]["measured_over_roofline"] / devices for name in ("fused_psum", "fused_stats")}
