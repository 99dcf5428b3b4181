"""Profile real transitions with named annotations, and read the durations back from the trace files.

Stable API (the stage 4 notebook and the bench, `python -m rig.bench`, use it):

- `capture(logdir, transitions_fn, replace=False) -> (result, TraceFiles)`: run
  `transitions_fn()` under `jax.profiler.trace(..., create_perfetto_trace=True)` and keep
  `logdir/plugins/profile/shardlab/{shardlab.xplane.pb, perfetto_trace.json.gz}`.
- `traced_transition(state, data, batch_size, step, mesh, next_batch=...) -> (state, loss, ids)`:
  one real transition as one `sharded_learner_step` step marker around `prepare_and_place`
  (advance the sampler, pad, place, wait for placement) and `compiled_update_and_wait`
  (the update plus readiness of every output); `traced_transitions(..., count, ...)` runs
  `count` of them and returns (state, log of step, loss, ids, reshuffled).
- `annotation_durations(logdir_or_files) -> list[dict]`: one dict per traced transition,
  in time order: `transition` (1-based), `start_ms` (from the first transition's start)
  and `<annotation>_ms` for the three annotations. Read from the XPlane with
  `jax.profiler.ProfileData` and from the Perfetto JSON; raises TraceError if an
  annotation is missing or the two readings differ by more than `TOLERANCE_MS`.
- `dominant(rows)` (which annotation has the larger median, with each one's middle half) and `breakdown(files)` (time
  inside each `prepare_and_place` covered by jitted dispatches, by placement, and the rest).

The profiler's Python tracer and HLO protos are switched off: they would add overhead to
the host work we time and write absolute source paths into the trace.
"""

import gzip
import json
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np

from shardlab import outdir
from shardlab.core.batch import next_batch as reference_next_batch
from shardlab.core.state import updated
from shardlab.errors import TraceError
from shardlab.evidence.timing import spread

STEP = "sharded_learner_step"
PREPARE = "prepare_and_place"
UPDATE = "compiled_update_and_wait"
ANNOTATIONS = (STEP, PREPARE, UPDATE)
RUN = "shardlab"  # capture folder name under plugins/profile (instead of a timestamp)
XPLANE = "shardlab.xplane.pb"  # instead of <hostname>.xplane.pb
PERFETTO = "perfetto_trace.json.gz"
CAPTURE = "trace"  # the manifest section of a capture folder (`shardlab.outdir`)
OWNS = ("plugins",)  # what a capture writes into its folder; a trace viewer may add its cache inside
TOLERANCE_MS = 1e-3  # both files hold the same nanosecond timestamps; allow rounding only
OUTLIER = 2.0  # a traced duration beyond twice its annotation's median is named beside the medians


class TraceFiles(NamedTuple):
    """Paths of one capture's XPlane protobuf and gzipped Perfetto JSON."""

    xplane: Path
    perfetto: Path


def _options() -> jax.profiler.ProfileOptions:
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    options.enable_hlo_proto = False
    return options


def capture(logdir, transitions_fn, replace: bool = False):
    """Return (transitions_fn(), TraceFiles) with the call traced into `logdir`.

    A previous capture in `logdir` is an error unless `replace` is true. Then what an earlier
    capture wrote there is replaced, finished or killed part way: the folder's manifest claims
    `plugins/` before the profiler writes (`shardlab.outdir`). Any other file in `logdir` is refused.
    """
    profile = Path(logdir) / "plugins" / "profile"
    if not replace and profile.exists() and any(profile.iterdir()):
        raise TraceError(f"{profile} already holds a capture; pass replace=True or choose a new logdir")
    logdir = outdir.owned_folder(logdir, CAPTURE, OWNS)
    with jax.profiler.trace(str(logdir), create_perfetto_trace=True, profiler_options=_options()):
        result = transitions_fn()
    (written,) = profile.iterdir()
    run = written.rename(profile / RUN)
    (xplane,) = run.glob("*.xplane.pb")
    xplane.rename(run / XPLANE)
    for duplicate in run.glob("*.trace.json.gz"):  # the Perfetto file is this file minus its metadata
        duplicate.unlink()
    outdir.seal(logdir, CAPTURE, OWNS)
    return result, TraceFiles(run / XPLANE, run / PERFETTO)


def traced_transition(state, data, batch_size, step, mesh, next_batch=reference_next_batch):
    """One transition, as `state.transition` computes it, with the three annotations; returns (state, loss, ids)."""
    with jax.profiler.StepTraceAnnotation(STEP, step_num=int(state["step"]) + 1):  # XProf: one step per transition
        with jax.profiler.TraceAnnotation(PREPARE):
            state, batch = next_batch(state, data, batch_size, mesh)
            jax.block_until_ready((batch.features, batch.targets, batch.mask))
        with jax.profiler.TraceAnnotation(UPDATE):
            outputs = jax.block_until_ready(
                step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])
            )
    weights, momentum, loss, _ = outputs
    return updated(state, weights, momentum), float(loss), batch.ids


def traced_transitions(state, data, batch_size, step, mesh, count, next_batch=reference_next_batch):
    """Run `count` traced transitions; return (state, log) with step, loss, ids and reshuffled per transition."""
    log = []
    for _ in range(count):
        key = np.asarray(state["key"])
        state, loss, ids = traced_transition(state, data, batch_size, step, mesh, next_batch)
        reshuffled = not np.array_equal(key, np.asarray(state["key"]))
        log.append({"step": state["step"], "loss": loss, "ids": ids, "reshuffled": reshuffled})
    return state, log


def find_files(logdir) -> TraceFiles:
    """The capture `capture` kept under `logdir`, or TraceError naming what is missing."""
    run = Path(logdir) / "plugins" / "profile" / RUN
    files = TraceFiles(run / XPLANE, run / PERFETTO)
    missing = [str(p) for p in files if not p.is_file()]
    if missing:
        raise TraceError(
            f"no trace files {missing}; capture one with shardlab.evidence.trace.capture({str(logdir)!r}, fn)"
        )
    return files


def xplane_events(path, names=ANNOTATIONS) -> list[tuple[str, int, int]]:
    """(name, start_ns, duration_ns) of every event called one of `names`, read with jax.profiler.ProfileData."""
    profile = jax.profiler.ProfileData.from_file(str(path))
    return sorted(
        (event.name, round(event.start_ns), round(event.duration_ns))
        for plane in profile.planes
        for line in plane.lines
        for event in line.events
        if event.name in names
    )


def xplane_lines(path):
    """Each line (thread) of an XPlane capture: its name and its events as (name, start_ns, end_ns)."""
    for plane in jax.profiler.ProfileData.from_file(str(path)).planes:
        for line in plane.lines:
            yield line.name, [(e.name, round(e.start_ns), round(e.start_ns + e.duration_ns)) for e in line.events]


def perfetto_events(path, names=ANNOTATIONS) -> list[tuple[str, int, int]]:
    """(name, start_ns, duration_ns) of every complete ('X') event called one of `names` (ts, dur in µs)."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        events = json.load(handle)["traceEvents"]
    return sorted(
        (event["name"], round(1e3 * event["ts"]), round(1e3 * event["dur"]))
        for event in events
        if event.get("ph") == "X" and event.get("name") in names
    )


def _agree(xplane: list, perfetto: list, files: TraceFiles) -> None:
    """Raise TraceError unless both readings list the same events with the same durations."""
    if [e[0] for e in xplane] != [e[0] for e in perfetto]:
        raise TraceError(
            f"{files.xplane.name} holds {len(xplane)} annotation events but {files.perfetto.name} holds "
            f"{len(perfetto)} (or in another order); the files are not from the same capture — capture again"
        )
    for (name, x_start, x_dur), (_, p_start, p_dur) in zip(xplane, perfetto):
        worst = max(abs(x_start - p_start), abs(x_dur - p_dur)) / 1e6
        if worst > TOLERANCE_MS:
            raise TraceError(
                f"'{name}' at {x_start / 1e6:.3f} ms: XPlane and Perfetto differ by {worst:.4f} ms "
                f"(allowed {TOLERANCE_MS} ms); the files are not from the same capture — capture again"
            )


def _inside(events: list, outer: tuple, name: str) -> list:
    start, end = outer[1], outer[1] + outer[2]
    return [e for e in events if e[0] == name and start <= e[1] and e[1] + e[2] <= end]


def transitions(events: list[tuple[str, int, int]]) -> list[dict]:
    """Group annotation events into transitions: each STEP must hold exactly one PREPARE and one UPDATE."""
    steps = [e for e in events if e[0] == STEP]
    if not steps:
        raise TraceError(
            f"the trace has no '{STEP}' annotation; wrap each transition in jax.profiler.TraceAnnotation('{STEP}')"
        )
    rows = []
    for index, outer in enumerate(steps, start=1):
        row = {"transition": index, "start_ms": (outer[1] - steps[0][1]) / 1e6, f"{STEP}_ms": outer[2] / 1e6}
        for name in (PREPARE, UPDATE):
            found = _inside(events, outer, name)
            if len(found) != 1:
                raise TraceError(
                    f"transition {index}: expected one '{name}' annotation inside '{STEP}', found {len(found)}; "
                    "trace transitions with shardlab.evidence.trace.traced_transition"
                )
            row[f"{name}_ms"] = found[0][2] / 1e6
        rows.append(row)
    for name in (PREPARE, UPDATE):
        total = sum(1 for e in events if e[0] == name)
        if total != len(steps):
            raise TraceError(f"{total} '{name}' annotations for {len(steps)} '{STEP}' annotations; some lie outside")
    return rows


def annotation_durations(where) -> list[dict]:
    """Per traced transition, the annotation durations in ms, read from both files, which must agree."""
    files = where if isinstance(where, TraceFiles) else find_files(where)
    xplane = xplane_events(files.xplane)
    _agree(xplane, perfetto_events(files.perfetto), files)
    return transitions(xplane)


GROUPS = {  # name prefixes of XPlane events on the Python thread, grouped for `breakdown`
    "jitted_dispatch": ("PjitFunction(",),
    "placement": ("shard_args", "DevicePut"),
}


def covered(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of (start, end) intervals: nested events are counted once."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def calls(events: list[tuple[str, int, int]], prefixes: tuple) -> list[str]:
    """The names of the events starting with `prefixes`, in the order they started; a function called twice is
    listed twice, an event inside another one (the same call recorded at two levels) once."""
    found, reach = [], None
    for name, start, end in sorted(events, key=lambda e: (e[1], -e[2])):
        if name.startswith(prefixes) and (reach is None or start >= reach):
            found.append(name)
            reach = end
    return found


def breakdown(where, annotation: str = PREPARE, groups: dict = GROUPS) -> list[dict]:
    """Per traced transition, ms inside `annotation` covered by each group of events on the same thread.

    Read from the XPlane only; the rest of the annotation (`other_ms`) is host work that this
    trace (Python tracer off) does not name. `dispatched` lists the jitted calls inside (`calls`).
    """
    files = where if isinstance(where, TraceFiles) else find_files(where)
    rows = []
    for _, events in xplane_lines(files.xplane):
        for _, start, end in sorted(e for e in events if e[0] == annotation):
            inside = [e for e in events if start <= e[1] and e[2] <= end and e[0] != annotation]
            row = {f"{annotation}_ms": (end - start) / 1e6}
            for group, prefixes in groups.items():
                spans = [(s, t) for n, s, t in inside if n.startswith(prefixes)]
                row[f"{group}_ms"] = covered(spans) / 1e6
            row["other_ms"] = row[f"{annotation}_ms"] - sum(row[f"{g}_ms"] for g in groups)
            row["dispatched"] = calls(inside, GROUPS["jitted_dispatch"])
            rows.append(row)
    if not rows:
        raise TraceError(f"the trace has no '{annotation}' annotation to break down")
    return rows


def dominant(rows: list[dict]) -> dict:
    """Which of preparation or update takes more median time in these transitions, by what factor, with what spread.

    Medians of a handful of transitions say little alone: each annotation's middle half (25th-75th percentile),
    how many transitions had the preparation longer, and every duration beyond OUTLIER times its annotation's
    median (`outliers`: transition, annotation, ms, median_ms) go with them.
    """
    out = {}
    for name in (PREPARE, UPDATE):
        side = spread([r[f"{name}_ms"] for r in rows])
        out.update({f"{q}_{name}_ms": side[f"{q}_ms"] for q in ("median", "q1", "q3")})
    prepare, update = out[f"median_{PREPARE}_ms"], out[f"median_{UPDATE}_ms"]
    outliers = [
        {
            "transition": r.get("transition", i + 1),
            "annotation": name,
            "ms": float(r[f"{name}_ms"]),
            "median_ms": out[f"median_{name}_ms"],
        }
        for i, r in enumerate(rows)
        for name in (PREPARE, UPDATE)
        if r[f"{name}_ms"] > OUTLIER * out[f"median_{name}_ms"]
    ]
    return {
        "dominant": PREPARE if prepare >= update else UPDATE,
        **out,
        "factor": max(prepare, update) / min(prepare, update),
        "transitions": len(rows),
        "prepare_longer_in": sum(1 for r in rows if r[f"{PREPARE}_ms"] > r[f"{UPDATE}_ms"]),
        "outliers": outliers,
        "outlier_count": len(outliers),
    }
