"""Three local optimisations, each measured beside its own baseline (the first `make bench` sections).

1. collectives: the packed one-all_reduce step against the three-all_reduce step and the
   compiled single-device step (warm timings, the stage 4 harness);
2. placement: transitions with the dataset resident on the devices against course
   transitions, traced alternately in one capture (stage 4 annotations);
3. dispatch: K updates per `lax.scan` call against one blocking update per call.

Each is one piece of a step; `perf.endtoend` measures whole loops. Every variant is checked
against NumPy before any clock runs; every comparison alternates; every sample is kept.
"""

from pathlib import Path

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from rig.bench import multistep, resident
from shardlab.core.batch import ROWS, next_batch
from shardlab.core.devices import AXIS
from shardlab.core.state import initial
from shardlab.core.update import count_all_reduce, make_step
from shardlab.errors import TraceError, VariantMismatchError
from shardlab.evidence import timing, trace
from shardlab.perf import profile
from shardlab.perf.packed import make_packed_step
from shardlab.verify import oracle

SAMPLES = 41  # warm samples per variant (stage 4 keeps 11; the bench can afford more)
WARMUP = 3
TRACED = 12  # traced transitions per variant
KS = (1, 2, 4, 8, 16)


def median(values) -> float:
    """Median as a plain float."""
    return float(np.median(values))


def _floor_programs(mesh, features) -> dict:
    """Four-device programs with (almost) no work: one scalar psum, and no collective at all."""
    first = jax.jit(jax.shard_map(lambda x: jax.lax.psum(x[0, 0], AXIS), mesh=mesh, in_specs=ROWS, out_specs=P()))
    local = jax.jit(jax.shard_map(lambda x: x[:1, 0] * 2, mesh=mesh, in_specs=ROWS, out_specs=P(AXIS)))
    return {
        "floor_psum_4dev": timing.compile_variant(first, (features,)),
        "floor_local_4dev": timing.compile_variant(local, (features,)),
    }


def _hlo_all_reduces(executable) -> list[str]:
    """The all-reduce instructions of a compiled executable's optimised HLO, cut before their attributes."""
    lines = [line.strip() for line in executable.as_text().splitlines() if " all-reduce(" in line]
    return [line.split(", channel_id")[0] for line in lines]


def collectives(data, mesh, samples=SAMPLES, warmup=WARMUP) -> dict:
    """Packed vs three-reduction four-device step vs the single-device step, same inputs, interleaved.

    Two do-nothing four-device programs are measured in the same rotation: the fixed
    cost of running four device programs, with and without one all-reduce.
    """
    host = timing.inputs(data, mesh)
    built = timing.build(host, mesh)
    args = built["compiled_4dev"].args
    variants = {
        "compiled_1dev": built["compiled_1dev"],
        "compiled_4dev": built["compiled_4dev"],
        "packed_4dev": timing.compile_variant(make_packed_step(mesh), args),
    }
    errors = timing.check(variants, host)
    packed_out, plain_out = (variants[n].fn(*args) for n in ("packed_4dev", "compiled_4dev"))
    variants.update(_floor_programs(mesh, args[0]))
    result = timing.summary(variants, timing.measure(variants, samples, warmup))
    result["max_abs_error_vs_numpy"] = errors
    result["packed_equals_three_reductions_bitwise"] = all(
        np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(packed_out, plain_out)
    )
    result["all_reduce"] = {
        "stablehlo": {
            "compiled_4dev": count_all_reduce(make_step(mesh).lower(*args).as_text()),
            "packed_4dev": count_all_reduce(make_packed_step(mesh).lower(*args).as_text()),
        },
        "optimised_hlo": {n: _hlo_all_reduces(variants[n].fn) for n in ("compiled_4dev", "packed_4dev")},
    }
    return result


def _check_steps(ids: list, losses, weights, data, label: str, rtol=1e-4, atol=1e-5) -> float:
    """Max abs difference of losses and final weights from NumPy updates over `ids` from zero; raise if off."""
    w = v = np.zeros(data.features.shape[1])
    want = []
    for batch in ids:
        w, v, loss, _ = oracle.momentum_step(data.features[batch], data.targets[batch], np.ones(len(batch)), w, v)
        want.append(loss)
    got = [np.asarray(losses, np.float64), np.asarray(weights, np.float64)]
    for name, a, b in zip(("losses", "weights"), got, (np.array(want), w)):
        if not np.allclose(a, b, rtol=rtol, atol=atol):
            raise VariantMismatchError(
                f"{label}: {name} differ from NumPy by up to {np.max(np.abs(a - b)):.3g}; nothing was timed"
            )
    return max(float(np.max(np.abs(a - b))) for a, b in zip(got, (np.array(want), w)))


def dispatch(data, mesh, batch_size, seed, ks=KS, samples=SAMPLES, warmup=WARMUP) -> dict:
    """Per-update time of K updates per `lax.scan` call against one blocking compiled update per call."""
    start = initial(seed, data, mesh)
    weights, momentum = start["weights"], start["momentum"]
    _, batch = next_batch(start, data, batch_size, mesh)
    variants = {"blocking_k1": timing.compile_variant(make_step(mesh), (*batch[:3], weights, momentum))}
    variants["blocking_k1_packed"] = timing.compile_variant(make_packed_step(mesh), variants["blocking_k1"].args)
    errors = {}
    for k in ks:
        _, placed, ids = multistep.prepare_many(start, data, batch_size, k, mesh)
        name = f"scan_k{k}"
        variants[name] = timing.compile_variant(multistep.make_multistep(mesh), (*placed, weights, momentum))
        new_w, _, losses = variants[name].fn(*variants[name].args)
        errors[name] = _check_steps(ids, losses, new_w, data, name)
    # also tried: the packed body inside the scan (one all_reduce per update instead of three)
    name = f"scan_k{ks[-1]}_packed"
    variants[name] = timing.compile_variant(
        multistep.make_multistep(mesh, packed=True), variants[f"scan_k{ks[-1]}"].args
    )
    new_w, _, losses = variants[name].fn(*variants[name].args)
    errors[name] = _check_steps(ids, losses, new_w, data, name)
    for name in ("blocking_k1", "blocking_k1_packed"):
        new_w, _, loss, _ = variants[name].fn(*variants[name].args)
        errors[name] = _check_steps([batch.ids], [loss], new_w, data, name)
    result = timing.summary(variants, timing.measure(variants, samples, warmup))
    steps = {
        "blocking_k1": 1,
        "blocking_k1_packed": 1,
        **{f"scan_k{k}": k for k in ks},
        f"scan_k{ks[-1]}_packed": ks[-1],
    }
    result["per_update_median_ms"] = {n: result[n]["median_ms"] / steps[n] for n in variants}
    result["max_abs_error_vs_numpy"] = errors
    result["batch_size"] = batch_size
    return result


def _paths(data, placed, mesh) -> dict:
    """(source, step, next_batch) of a stage 2 transition ("before") and a resident one ("after")."""
    return {
        "before": (data, make_step(mesh), next_batch),
        "after": (placed, resident.make_resident_step(mesh), resident.next_batch),
    }


def _alternating(paths: dict, data, batch_size, seed, mesh, count):
    """`count` traced transitions of each path from the same start, alternating which goes first."""
    states = {name: initial(seed, data, mesh) for name in paths}
    order, log = [], {name: [] for name in paths}
    for index in range(count):
        for name in sorted(paths, reverse=index % 2 == 1):
            source, step, prepare = paths[name]
            states[name], loss, ids = profile.transition(states[name], source, batch_size, step, mesh, prepare)
            log[name].append({"loss": loss, "ids": ids, "weights": states[name]["weights"]})
            order.append(name)
    return states, log, order


def placement(data, mesh, batch_size, seed, logdir, count=TRACED) -> dict:
    """Traced prepare_and_place / compiled_update_and_wait before and after keeping the dataset on the devices."""
    paths = _paths(data, resident.place_dataset(data, mesh), mesh)
    _, warm, _ = _alternating(paths, data, batch_size, seed, mesh, 3)  # compiles; checked before tracing
    for name, entries in warm.items():
        _check_steps([e["ids"] for e in entries], [e["loss"] for e in entries], entries[-1]["weights"], data, name)
    (states, log, order), files = trace.capture(
        logdir, lambda: _alternating(paths, data, batch_size, seed, mesh, count), replace=True
    )
    rows = trace.annotation_durations(files)
    if len(rows) != len(order):
        raise TraceError(f"{len(order)} transitions were traced but the capture holds {len(rows)}; capture again")
    base = Path(logdir).parent  # paths in bench.json are relative to the output folder
    result = {"trace": {k: str(Path(v).relative_to(base)) for k, v in files._asdict().items()}, "order": order}
    ids = {name: [entry["ids"] for entry in log[name]] for name in log}
    if any(not np.array_equal(a, b) for a, b in zip(ids["before"], ids["after"])):
        raise VariantMismatchError("resident transitions selected other sample IDs than stage 2 transitions")
    for name in ("before", "after"):
        mine = [row for row, who in zip(rows, order) if who == name]
        errors = _check_steps(ids[name], [e["loss"] for e in log[name]], states[name]["weights"], data, name)
        result[name] = {
            "transitions": mine,
            **{f"median_{a}_ms": median([r[f"{a}_ms"] for r in mine]) for a in (trace.PREPARE, trace.UPDATE)},
            "max_abs_error_vs_numpy": errors,
        }
    weights = [np.asarray(states[n]["weights"]) for n in ("before", "after")]
    result["identical_ids"] = True
    result["max_abs_weight_difference"] = float(np.max(np.abs(weights[0] - weights[1])))
    result["weights_bitwise_equal"] = bool(np.array_equal(*weights))
    result["batch_size"] = batch_size
    return result
