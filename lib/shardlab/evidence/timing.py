"""Warm timings of three equivalent updates, compiled explicitly and checked before any clock runs.

Variants (the names the audit uses):

- `eager_4dev`: the four-device `shard_map` body dispatched op by op (no outer `jit`);
- `compiled_4dev`: the same body lowered and compiled for the four-device mesh;
- `compiled_1dev`: the global update with no collectives, compiled for one device.

Measurement boundary: inputs are padded and placed before any sample; a sample is one
call of a warmed-up variant plus `jax.block_until_ready` on every output leaf. Sampling
and placement are outside the clock. The warm-up counts the XLA compilations a call still
triggers (`compilations`): zero for the compiled variants, every call for the eager one; so does
every timed call, so a variant's median can be read with its compiling taken out.
"""

import contextlib
import time
from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh

from shardlab.core.batch import pad, place
from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.state import replicate
from shardlab.core.update import make_single_device_step, make_step
from shardlab.errors import VariantMismatchError
from shardlab.verify.oracle import momentum_step

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # jax.monitoring event of one XLA compile
VARIANTS = ("eager_4dev", "compiled_4dev", "compiled_1dev")
SAMPLES = 11
WARMUP = 1
PROGRESS_EVERY_S = 10  # at most one 'round r/N' line per this many seconds of sampling
BOUNDARY = (
    "inputs already padded and placed; one sample = one call of a warmed-up variant plus "
    "jax.block_until_ready on every output leaf; no sampling, no placement. Explicit compilation "
    "is timed separately; XLA compilations still triggered by a warm call are counted in warm_compilations"
)


class Variant(NamedTuple):
    """A callable update, its placed arguments, and its lower/compile times (None when eager)."""

    fn: object
    args: tuple
    lower_ms: float | None
    compile_ms: float | None


def inputs(data, mesh: Mesh, seed: int = 0) -> dict:
    """Host (features, targets, mask, weights, momentum): every row once, padded; seeded non-zero w and v."""
    rng = np.random.default_rng(seed)
    features, targets, mask = pad(data, np.arange(len(data.targets)), mesh.size)
    width = features.shape[1]
    weights = rng.normal(scale=0.1, size=width).astype(np.float32)
    momentum = rng.normal(scale=0.1, size=width).astype(np.float32)
    return {"features": features, "targets": targets, "mask": mask, "weights": weights, "momentum": momentum}


def compile_variant(jitted, args: tuple) -> Variant:
    """Lower, then compile, each on its own clock."""
    start = time.perf_counter()
    lowered = jitted.lower(*args)
    lowered_at = time.perf_counter()
    executable = lowered.compile()
    done = time.perf_counter()
    return Variant(executable, args, 1e3 * (lowered_at - start), 1e3 * (done - lowered_at))


def build(host: dict, mesh: Mesh, make_sharded=make_step, learning_rate=LEARNING_RATE, decay=DECAY) -> dict:
    """The three variants with placed arguments; the compiled ones lowered and compiled explicitly.

    `make_sharded` is the implementation's `make_step` (the learner's or the reference).
    """
    sharded_args = (
        *place(host["features"], host["targets"], host["mask"], mesh),
        replicate(host["weights"], mesh),
        replicate(host["momentum"], mesh),
    )
    device = jax.devices()[0]
    single_args = tuple(jax.device_put(host[k], device) for k in ("features", "targets", "mask", "weights", "momentum"))
    eager = make_sharded(mesh, learning_rate, decay, compiled=False)
    return {
        "eager_4dev": Variant(eager, sharded_args, None, None),
        "compiled_4dev": compile_variant(make_sharded(mesh, learning_rate, decay, compiled=True), sharded_args),
        "compiled_1dev": compile_variant(make_single_device_step(learning_rate, decay), single_args),
    }


@contextlib.contextmanager
def compiling():
    """Yield a list that fills with the duration (s) of each backend compilation while the block runs."""
    seen = []

    def listener(event, duration_secs, **_):
        if event == COMPILE_EVENT:
            seen.append(duration_secs)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


def _counted(seen: list) -> dict:
    return {"count": len(seen), "total_ms": 1e3 * sum(seen)}


def compilations(fn, args, block=jax.block_until_ready) -> dict:
    """Backend compilations (count and total ms) that one blocking call of `fn(*args)` triggers."""
    with compiling() as seen:
        block(fn(*args))
    return _counted(seen)


def check(variants: dict, host: dict, learning_rate=LEARNING_RATE, decay=DECAY, rtol=1e-4, atol=1e-5) -> dict:
    """Max abs difference of each variant's (weights, momentum, loss, grad) from NumPy; raise if any is off."""
    expected = momentum_step(
        host["features"], host["targets"], host["mask"], host["weights"], host["momentum"], learning_rate, decay
    )
    names = ("weights", "momentum", "loss", "grad")
    errors = {}
    for variant, (fn, args, _, _) in variants.items():
        outputs = [np.asarray(o, np.float64) for o in fn(*args)]
        for name, got, want in zip(names, outputs, expected):
            if not np.allclose(got, want, rtol=rtol, atol=atol):
                raise VariantMismatchError(
                    f"{variant}: {name} differs from the NumPy update by up to {np.max(np.abs(got - want)):.3g} "
                    f"(allowed rtol={rtol}, atol={atol}); nothing was timed. Fix the update before measuring it."
                )
        errors[variant] = max(float(np.max(np.abs(g - w))) for g, w in zip(outputs, expected))
    return errors


def rotations(names, rounds: int) -> list[list[str]]:
    """Round r calls the variants starting at index r mod len(names): each leads equally often."""
    names = list(names)
    return [names[r % len(names) :] + names[: r % len(names)] for r in range(rounds)]


def sample_ms(variant: Variant, clock=time.perf_counter, block=jax.block_until_ready) -> float:
    """One sample, in ms: a call of a warm variant on inputs already placed, until every output leaf is ready."""
    start = clock()
    outputs = variant.fn(*variant.args)  # dispatched: JAX returns before the work is done
    block(outputs)  # waits for every array in the output tuple, not only the first
    return 1e3 * (clock() - start)


def measure(
    variants: dict,
    samples=SAMPLES,
    warmup=WARMUP,
    clock=time.perf_counter,
    block=jax.block_until_ready,
    progress=print,
    caps=None,
):
    """Warm every variant, then `samples` rounds in rotating order; every sample kept, in ms.

    `caps` ({variant: n}) keeps a slow variant to its first n rounds (the eager one takes about a
    second a call); the others still take `samples`.

    Returns {"order": the rounds as called, "samples_ms": {variant: [ms, ...]},
    "warm_compilations": {variant: compilations during its last warm-up call},
    "sample_compilations": {variant: [compilations during each timed call]}}. `progress`
    gets one short line per variant warmed and per variant sampled, and one per round when
    rounds are slow (None: silent): the eager variant alone takes seconds a call, so a long
    cell says what it is doing.
    """
    say = progress or (lambda line: None)
    warm, started = {}, time.perf_counter()
    for order in rotations(variants, warmup):
        for name in order:
            warm[name] = compilations(variants[name].fn, variants[name].args, block)
            say(f"timing: {name} warmed ({warm[name]['count']} XLA compilations in its last warm-up call)")
    rounds = rotations(variants, samples)
    samples_ms = {name: [] for name in variants}
    in_samples = {name: [] for name in variants}  # the XLA compilations each timed call triggered
    shown = time.perf_counter()
    with compiling() as seen:
        for number, order in enumerate(rounds, start=1):
            for name in order:
                if len(samples_ms[name]) >= (caps or {}).get(name, samples):
                    continue
                seen.clear()
                samples_ms[name].append(sample_ms(variants[name], clock, block))
                in_samples[name].append(_counted(seen))
            if time.perf_counter() - shown > PROGRESS_EVERY_S and number < len(rounds):
                say(f"timing: round {number}/{len(rounds)} done, {time.perf_counter() - started:.0f} s so far")
                shown = time.perf_counter()
    for name, taken in samples_ms.items():
        say(f"timing: {name} {len(taken)} samples, median {np.median(taken):.4g} ms")
    say(f"timing: {len(rounds)} rounds in rotating order, {time.perf_counter() - started:.1f} s with warm-up")
    return {"order": rounds, "samples_ms": samples_ms, "warm_compilations": warm, "sample_compilations": in_samples}


def spread(samples, to_ms: float = 1.0) -> dict:
    """The median and middle half (25th to 75th percentile) of `samples` times `to_ms` (1e3 for seconds), unrounded."""
    q1, median, q3 = (to_ms * float(v) for v in np.percentile(samples, [25, 50, 75]))
    return {"median_ms": median, "q1_ms": q1, "q3_ms": q3, "n": len(samples)}


def _compiling_in_samples(samples_ms: list, compiled: list | None) -> dict:
    """The XLA compiling inside a variant's timed calls: per call, the median count and ms, and the median of each
    call's time less its compiling (the same interval, with XLA's compile time taken out); nothing when not counted."""
    if not compiled:
        return {}
    less = [ms - c["total_ms"] for ms, c in zip(samples_ms, compiled)]
    return {
        "sample_compilations": {
            "median_count": float(np.median([c["count"] for c in compiled])),
            "median_ms": float(np.median([c["total_ms"] for c in compiled])),
        },
        "median_less_compile_ms": float(np.median(less)),
        "q1_less_compile_ms": float(np.percentile(less, 25)),
        "q3_less_compile_ms": float(np.percentile(less, 75)),
    }


def summary(variants: dict, measured: dict) -> dict:
    """The audit's `timing` object: one entry per variant, then ratios of medians, order and boundary."""
    table = {
        name: {
            "samples_ms": measured["samples_ms"][name],
            "median_ms": float(np.median(measured["samples_ms"][name])),
            "q1_ms": float(np.percentile(measured["samples_ms"][name], 25)),
            "q3_ms": float(np.percentile(measured["samples_ms"][name], 75)),
            "lower_ms": variants[name].lower_ms,
            "compile_ms": variants[name].compile_ms,
            "warm_compilations": measured.get("warm_compilations", {}).get(name),
            **_compiling_in_samples(measured["samples_ms"][name], measured.get("sample_compilations", {}).get(name)),
        }
        for name in variants
    }
    median = {name: row["median_ms"] for name, row in table.items()}
    pairs = {  # a ratio is given when both variants were measured (bench measures other sets)
        "compiled_4dev_over_compiled_1dev": ("compiled_4dev", "compiled_1dev"),
        "eager_4dev_over_compiled_4dev": ("eager_4dev", "compiled_4dev"),
    }
    ratios = {key: median[a] / median[b] for key, (a, b) in pairs.items() if a in median and b in median}
    if "median_less_compile_ms" in table.get("eager_4dev", {}) and "compiled_4dev" in median:
        less = table["eager_4dev"]["median_less_compile_ms"] / median["compiled_4dev"]
        ratios["eager_4dev_less_compile_over_compiled_4dev"] = less
    return {**table, "ratios": ratios, "order": measured["order"], "boundary": BOUNDARY}
