"""Each controller's step records read as spreads: per phase the median and middle half of every process,
the steps that compile against the rest, and which of two processes took longer in a phase.

A few steps on a shared machine give a median that moves with load; the middle half (25th to 75th
percentile) beside it lets a reader see whether two processes' phases separate (stage 5b).
"""

from shardlab.evidence import timing

# a record's phases (program.step_times): its key and what the phase holds
PHASES = (
    ("data_s", "data (sampler, placement)"),
    ("agreement_s", "agreement (batch hash, key-value rendezvous)"),
    ("compute_s", "compute (update, its three psums inside)"),
)


def spread(samples) -> dict:
    """`timing.spread` of `samples` seconds, in milliseconds (a record's phases are in seconds)."""
    return timing.spread(samples, to_ms=1e3)


def table(step_times: dict, leave_out=()) -> list[dict]:
    """One row per process and phase: its spread over the steps not in `leave_out` (the steps that compile)."""
    rows = []
    for process, records in step_times.items():
        kept = [r for r in records if r["step"] not in leave_out]
        for key, label in PHASES:
            rows.append({"process": process, "phase": label, **spread([r[key] for r in kept])})
    return [{k: row[k] for k in ("process", "phase", "n", "q1_ms", "median_ms", "q3_ms")} for row in rows]


def compile_height(step_times: dict, compiles) -> dict:
    """The shortest whole step among `compiles` against the longest other one, in ms, on every process."""
    totals = {p: {r["step"]: 1e3 * sum(r[k] for k, _ in PHASES) for r in recs} for p, recs in step_times.items()}
    compiling = [ms for steps in totals.values() for n, ms in steps.items() if n in compiles]
    others = [(ms, p, n) for p, steps in totals.items() for n, ms in steps.items() if n not in compiles]
    ms, process, step = max(others)
    record = next(r for r in step_times[process] if r["step"] == step)
    (first, first_label), (second, second_label) = sorted(PHASES, key=lambda kv: -record[kv[0]])[:2]
    found = {"max_other_ms": ms, "max_other_other": step, "max_other_process": process}
    # its two longest phases, each by its first word, with their ms
    found.update(max_other_phase=first_label.split(" ")[0], max_other_phase_ms=1e3 * record[first])
    found.update(max_other_second=second_label.split(" ")[0], max_other_second_ms=1e3 * record[second])
    # the same step on the other processes: the longest of them, as each waits for the others inside a step
    peers = [(steps[step], p) for p, steps in totals.items() if p != process and step in steps]
    if peers:
        found.update(max_other_peer_ms=max(peers)[0], max_other_peer=max(peers)[1])
    return {"compile_steps": list(compiles), "min_compile_ms": min(compiling), **found}


def longer_first(rows: list[dict], phase: str) -> tuple[dict, dict, float]:
    """Of `table`'s rows for the phase whose label starts with `phase`: the longer median's, the other, their ratio."""
    longer, shorter = sorted((r for r in rows if r["phase"].startswith(phase)), key=lambda r: -r["median_ms"])[:2]
    return longer, shorter, longer["median_ms"] / shorter["median_ms"]
