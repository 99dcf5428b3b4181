"""Stage 4 checks, kept modest: the compiled step lowers and compiles with all_reduce ops, and the
eager (compiled=False) and compiled steps both match NumPy and each other."""

import numpy as np

from shardlab.checker import formulas
from shardlab.checker.common import batch_arrays, cached_step, close, expect, placed
from shardlab.checker.probes import probe
from shardlab.checker.properties import host_outputs
from shardlab.core.update import count_all_reduce
from shardlab.verify import oracle

STAGE = 4
ROWS = 7  # uneven partitions [2, 2, 2, 1]


def _inputs(ctx):
    width = ctx.data.features.shape[1]
    weights = np.random.default_rng(11).normal(size=width).astype(np.float32)
    momentum = np.random.default_rng(12).normal(size=width).astype(np.float32)
    host = (*batch_arrays(ctx.data, np.arange(ROWS), ctx.mesh.size), weights, momentum)
    return host, placed(ctx.mesh, *host)


def _versus_numpy(outputs: dict, host) -> list[str]:
    want = dict(zip(("weights", "momentum", "loss", "grad"), oracle.momentum_step(*host)))
    return [name for name in want if not close(outputs[name], want[name])]


def _cause(outputs: dict, host, num_devices: int) -> str:
    """Why the gradient output is wrong, when the known formulas say (from non-zero momentum, which the inputs
    hold, a gradient output that is the new momentum is told apart); empty if the gradient is right or unknown."""
    features, targets, mask, weights, momentum = host
    right = oracle.momentum_step(*host)[3]
    if close(outputs["grad"], right):
        return ""
    found = formulas.momentum_as_gradient(outputs["grad"], outputs["momentum"], right, momentum)
    found = found or formulas.explain_gradient(outputs["grad"], features, targets, mask, weights, num_devices)
    return f": {found}" if found else ""


def _eager(ctx) -> dict:
    """Outputs of make_step(compiled=False), computed once per run (eager dispatch is slow)."""
    if "eager" not in ctx.cache:
        ctx.cache["eager"] = host_outputs(ctx.impl.make_step(ctx.mesh, compiled=False)(*_inputs(ctx)[1]))
    return ctx.cache["eager"]


def compiled_step_lowers_and_compiles(ctx):
    """make_step(compiled=True) lowers (with all_reduce ops), compiles, and its result matches NumPy."""
    host, args = _inputs(ctx)
    step = ctx.impl.make_step(ctx.mesh, compiled=True)
    try:
        lower = step.lower
    except AttributeError:
        outputs = host_outputs(step(*args))
        wrong = _versus_numpy(outputs, host)
        expect(
            False,
            "the jax.jit function itself (it has .lower)",
            "a function without .lower" + (f"; {wrong} differ from NumPy" if wrong else ""),
            "make_step(compiled=True) returned a function without .lower(): a Python function around the jitted "
            "step, not the jit itself -> return jax.jit(mapped) as it is, and do any other work inside the mapped "
            "body"
            + (f"; its outputs {wrong} also differ from NumPy{_cause(outputs, host, ctx.mesh.size)}" if wrong else "")
            + formulas.mark("sharded-step"),
        )
    lowered = lower(*args)
    found = count_all_reduce(lowered.as_text())
    expect(found >= 1, ">= 1 all_reduce", found, "the compiled step lost its collectives: keep shard_map + psum")
    outputs = host_outputs(lowered.compile()(*args))
    wrong = _versus_numpy(outputs, host)
    return expect(
        not wrong,
        "compiled outputs equal NumPy",
        f"{wrong} differ",
        "the compiled executable is wrong" + _cause(outputs, host, ctx.mesh.size),
    )


def eager_step_matches_numpy(ctx):
    """make_step(compiled=False), the same mapped body without jit, matches NumPy."""
    host = _inputs(ctx)[0]
    wrong = _versus_numpy(_eager(ctx), host)
    return expect(
        not wrong,
        "eager outputs equal NumPy",
        f"{wrong} differ",
        "compiled=False must return the same shard_map body without the outer jax.jit, not another computation"
        + _cause(_eager(ctx), host, ctx.mesh.size),
    )


def eager_and_compiled_agree(ctx):
    """Eager and compiled steps give the same numbers on the same placed inputs."""
    _, args = _inputs(ctx)
    eager = _eager(ctx)
    compiled = host_outputs(cached_step(ctx)(*args))
    wrong = [name for name in eager if not close(eager[name], compiled[name])]
    return expect(not wrong, "equal outputs", f"{wrong} differ", "compiled and eager steps must be one computation")


def _outer_primitives(step, args) -> list[str]:
    """Names of the top-level operations JAX traces for `step(*args)`: ['jit'] for a jitted step."""
    return list(probe("top_level_operations", step, *args))


def eager_step_is_the_unjitted_mapped_body(ctx):
    """compiled=False traces to a bare shard_map (no outer jit); compiled=True to one jit around a shard_map."""
    _, args = _inputs(ctx)
    eager = _outer_primitives(ctx.impl.make_step(ctx.mesh, compiled=False), args)
    compiled = _outer_primitives(ctx.impl.make_step(ctx.mesh, compiled=True), args)
    expect(
        "shard_map" in eager,
        "a shard_map with no jit around it",
        eager,
        "make_step(compiled=False) "
        + (
            "is still jitted: the dispatch experiment would time the compiled step twice -> return the mapped "
            "function without the outer jax.jit"
            if eager == ["jit"]
            else "has no shard_map: it must be the same mapped body, only without jax.jit"
        ),
    )
    return expect(
        compiled == ["jit"],
        ["jit"],
        compiled,
        "make_step(compiled=True) must be one jax.jit around the shard_map (found other top-level operations)",
    )


CHECKS = (
    compiled_step_lowers_and_compiles,
    eager_step_matches_numpy,
    eager_and_compiled_agree,
    eager_step_is_the_unjitted_mapped_body,
)
