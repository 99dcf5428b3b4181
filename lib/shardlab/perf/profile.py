"""Profile again: the optimised paths under the stage 4 annotations, and their device-thread events.

`traced(prepare, update)` wraps any transition as stage 4 does: one `sharded_learner_step`
holding `prepare_and_place` (everything up to placed inputs, waited for) and
`compiled_update_and_wait` (the compiled call plus readiness of every output), so
`evidence.trace.annotation_durations` reads the result like the course loop's trace. For
the fused loop one annotated transition is one dispatch of K steps: preparation is the
state's conversion to the device form, the update is K whole steps, sampling included.

`device_events` reads the other side of the capture: the XPlane lines of the CPU device
threads (not the Python thread), i.e. what the four logical devices executed.
"""

import jax
import numpy as np

from shardlab.core.batch import next_batch as course_next_batch
from shardlab.core.state import initial, updated
from shardlab.core.update import make_step
from shardlab.errors import TraceError
from shardlab.evidence import trace
from shardlab.perf import fused
from shardlab.perf.device_sampler import DeviceSampler
from shardlab.perf.fused import Carry, Dispatch

DEVICE_THREADS = "tf_XLA"  # XPlane line names of the CPU client's worker threads start with this


def traced(prepare, update):
    """Return update(prepare()) under the three stage 4 annotations; both results are waited for."""
    with jax.profiler.TraceAnnotation(trace.STEP):
        with jax.profiler.TraceAnnotation(trace.PREPARE):
            placed = jax.block_until_ready(prepare())
        with jax.profiler.TraceAnnotation(trace.UPDATE):
            return jax.block_until_ready(update(placed))


def transition(state, source, batch_size, step, mesh, next_batch=course_next_batch) -> tuple[dict, float, np.ndarray]:
    """One transition, annotated; returns (state, loss, ids). The course's (`sl.transition`) by default.

    `next_batch(state, source, batch_size, mesh)` returns (state, batch) whose first three
    fields are the step's first three arguments and whose `ids` are the host IDs (a course
    `Batch`, or a `resident.ResidentBatch` with the dataset already on the devices).
    """
    prepared = {}

    def prepare():
        prepared["state"], batch = next_batch(state, source, batch_size, mesh)
        prepared["ids"] = batch.ids
        return batch[:3]

    def update(batch):
        new = prepared["state"]
        return step(*batch, new["weights"], new["momentum"])

    weights, momentum, loss, _ = traced(prepare, update)
    return updated(prepared["state"], weights, momentum), float(loss), prepared["ids"]


def fused_dispatch(loop, state: dict, steps: int) -> tuple[dict, np.ndarray, list]:
    """One annotated dispatch of a `fused.FusedLoop`: `steps` transitions; returns (state, losses, ids)."""
    out = traced(lambda: loop.arguments(state, steps), lambda args: loop.program(*args))
    key, order, cursor, weights, momentum, record = out
    return loop.finish(state, [Dispatch(Carry(DeviceSampler(key, order, cursor), weights, momentum), record, steps)])


WAITING = ("rendezvous", "wait")  # parts of the names of events in which a device thread waits for the others
COLLECTIVE = ("psum", "all-reduce")  # parts of the names of collective ops: their own time is the op running


def kind(name: str) -> str:
    """What a device-thread event is, by its name: 'waiting', 'collective' (the op's own run) or 'program'."""
    lower = name.lower()
    if any(w in lower for w in WAITING):
        return "waiting"
    if any(w in lower for w in COLLECTIVE):
        return "collective"
    return "program"


def exclusive(events: list[tuple[str, int, int]]) -> list[dict]:
    """One thread's events with their nesting: each event's own (exclusive) ns and the event it sits inside.

    An event's own time is its duration less the time of the events directly inside it, so on one
    thread the own times add up to the time the thread was busy. An event that starts inside another
    and runs past its end counts as inside it; only the overlap comes off the outer event's own time.
    """
    found, stack = [], []
    for name, start, end in sorted(events, key=lambda e: (e[1], -e[2])):
        while stack and start >= stack[-1]["end"]:
            stack.pop()
        parent = stack[-1] if stack else None
        row = {
            "name": name,
            "start": start,
            "end": end,
            "own": end - start,
            "inside": parent["name"] if parent else None,
        }
        if parent is not None:
            parent["own"] -= min(end, parent["end"]) - start
        found.append(row)
        stack.append(row)
    return found


def device_events(files, prefix: str = DEVICE_THREADS, windows=None) -> list[dict]:
    """Per device thread of the capture: its name, event count, busy ms (union of events) and its events' times.

    `top` sums each event name's whole durations (nested events counted inside their parents too);
    `own` sums each name's exclusive time (`exclusive`) with the name it most often sits inside, so
    its rows add up to `busy_ms`; a row's `ms` is the time its name's events cover (a union of intervals
    like `busy_ms`, so an event nested in one of the same name counts once and no row exceeds the busy time);
    `own_by_kind_ms` sums the own times by `kind` (waiting, collective, program).
    `windows`, a list of (loop, start_ns, end_ns), says which loop ran when: each event then belongs to
    the window its start falls in ("(outside)" if none), its `own` rows are kept apart per loop (`loop`),
    and `by_loop` gives each loop's busy ms and own times by kind.
    """
    found = []
    for thread, events in trace.xplane_lines(files.xplane):
        if not thread.startswith(prefix) or not events:
            continue

        def loop_of(start):
            return next((name for name, lo, hi in windows or () if lo <= start < hi), "(outside)" if windows else None)

        totals, own, inside, spans = {}, {}, {}, {}
        for name, start, end in events:
            totals[name] = totals.get(name, 0) + (end - start)
        for row in exclusive(events):
            key = (row["name"], loop_of(row["start"]))
            own[key] = own.get(key, 0) + row["own"]
            inside.setdefault(key, []).append(row["inside"] or "(top level)")
            spans.setdefault(key[1], []).append((row["start"], row["end"]))
        top = sorted(totals.items(), key=lambda item: -item[1])[:3]
        by_kind = {"waiting": 0, "collective": 0, "program": 0}
        by_loop = {loop: {"busy_ms": trace.covered(spans[loop]) / 1e6, "waiting_ms": 0.0, "collective_ms": 0.0,
                          "program_ms": 0.0} for loop in spans if loop is not None}  # fmt: skip
        whole = {}
        for name, start, end in events:
            whole.setdefault((name, loop_of(start)), []).append((start, end))
        whole = {key: trace.covered(intervals) for key, intervals in whole.items()}
        for (name, loop), ns in own.items():
            by_kind[kind(name)] += ns
            if loop is not None:
                by_loop[loop][f"{kind(name)}_ms"] += ns / 1e6
        found.append(
            {
                "thread": thread,
                "events": len(events),
                "busy_ms": trace.covered([(start, end) for _, start, end in events]) / 1e6,
                "own": [
                    {
                        "name": name,
                        **({"loop": loop} if loop is not None else {}),
                        "kind": kind(name),
                        "own_ms": ns / 1e6,
                        "ms": whole[name, loop] / 1e6,
                        "inside": _most(inside[name, loop]),
                    }
                    for (name, loop), ns in sorted(own.items(), key=lambda item: -item[1])
                ],
                "own_by_kind_ms": {k: ns / 1e6 for k, ns in by_kind.items()},
                **({"by_loop": by_loop} if windows else {}),
                "top": [{"name": name, "ms": ns / 1e6} for name, ns in top],
            }
        )
    return found


def _most(names: list[str]) -> str:
    return max(sorted(set(names)), key=names.count)


def alternately(logdir, loops: dict, count: int) -> dict:
    """Trace `count` transitions of every loop in one capture, alternating which goes first; read them back.

    `loops` maps a name to (state, advance), where `advance(state) -> (state, loss, ids)` runs one
    annotated transition. Returns the capture's files, the order, and per loop its annotation
    rows, its (loss, ids) log and its last state.
    """
    states = {name: state for name, (state, _) in loops.items()}
    log = {name: [] for name in loops}

    def run():
        order = []
        for index in range(count):
            for name in sorted(loops, reverse=index % 2 == 1):
                states[name], loss, ids = loops[name][1](states[name])
                log[name].append((loss, ids))
                order.append(name)
        return order

    order, files = trace.capture(logdir, run, replace=True)
    rows = trace.annotation_durations(files)
    sides = {name: [r for r, who in zip(rows, order) if who == name] for name in loops}
    return {"files": files, "order": order, "rows": sides, "log": log, "states": states}


def before_after(data, mesh, batch_size: int, seed: int, logdir, count=4, k=100, body=None, variant="auto") -> dict:
    """Course transitions and fused dispatches of K steps, traced alternately in one capture, read back.

    Both start from the same state (one warm, untraced call each first, which compiles).
    Returns the per-transition annotation rows of each side, per-step medians (a fused
    row is K steps), the device-thread events and the capture's files.
    """
    step, loop = make_step(mesh), fused.FusedLoop(data, mesh, batch_size, k, body=body, variant=variant)
    start = initial(seed, data, mesh)
    course, _, _ = transition(start, data, batch_size, step, mesh)
    looped, _, _ = fused_dispatch(loop, start, k)
    captured = alternately(
        logdir,
        {
            "before": (course, lambda state: transition(state, data, batch_size, step, mesh)),
            "after": (looped, lambda state: fused_dispatch(loop, state, k)),
        },
        count,
    )
    sides, files = captured["rows"], captured["files"]
    steps = {"before": 1, "after": k}
    per_step = {
        side: {
            f"median_{name}_ms_per_step": float(np.median([r[f"{name}_ms"] for r in mine])) / steps[side]
            for name in (trace.STEP, trace.PREPARE, trace.UPDATE)
        }
        for side, mine in sides.items()
    }
    return {
        "files": files,
        "order": captured["order"],
        "steps_per_transition": steps,
        **sides,
        "per_step": per_step,
        "device_threads": device_events(files, windows=step_windows(files, captured["order"])),
    }


def step_windows(files, order: list[str]) -> list[tuple[str, int, int]]:
    """(loop, start_ns, end_ns) of each traced transition's outer annotation, in capture order, named by `order`."""
    steps = [(start, start + duration) for _, start, duration in trace.xplane_events(files.xplane, names=(trace.STEP,))]
    if len(steps) != len(order):
        raise TraceError(f"{len(steps)} {trace.STEP} annotations in the capture but {len(order)} transitions run")
    return [(name, lo, hi) for name, (lo, hi) in zip(order, sorted(steps))]
