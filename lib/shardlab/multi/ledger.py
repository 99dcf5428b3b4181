"""What a supervised run cost, and whether its pieces make one continuous run.

From a `group_supervisor.supervise` result (every attempt's progress events, read from process 0
or the lowest process that left any) this computes:

- the loss path: for each attempt, the steps it completed up to the step the next attempt
  resumed from (later ones were recomputed); together they must be steps 1..N exactly once;
- the goodput ledger, seconds: start-up and initialisation (launch to ready), restore,
  compilation (in each attempt, the first step of each batch shape: the update is compiled for the
  shape its padded batch has, or loaded from a compilation cache a drill series shares; it includes
  that step's own run), productive steps, save (the blocking part, on the training thread), detection (the
  fault to the supervisor's verdict), teardown, wasted steps (completed, then recomputed
  after a failure; a recomputed step that compiled counts as compilation, so a wasted second is a step's
  own run, its agreement and any publication done inside it), and the rest as `other` (each batch's
  sampling and placement, which run before a step's clock starts, the interpreter's shutdown, anything unnamed).
"""

from shardlab.core import batch
from shardlab.multi import control

PARTS = ("startup", "restore", "compile", "productive", "save_block", "detection", "teardown", "wasted", "other")


def events(attempt: dict) -> list[dict]:
    """The progress events of an attempt, read from its lowest process that left any."""
    found = [attempt["progress"][pid] for pid in sorted(attempt["progress"]) if attempt["progress"][pid]]
    return found[0] if found else []


def resumed_from(attempt: dict) -> int:
    """The step an attempt restored (0 for a fresh start)."""
    return next((e["step"] for e in events(attempt) if e["event"] == "restored"), 0)


def path(result: dict) -> list[dict]:
    """The steps that survive: attempt k's steps up to attempt k+1's resume step, and all of the last's."""
    attempts, kept = result["attempts"], []
    for k, attempt in enumerate(attempts):
        stop = resumed_from(attempts[k + 1]) if k + 1 < len(attempts) else None
        kept += [e for e in events(attempt) if e["event"] == "step" and (stop is None or e["step"] <= stop)]
    return kept


def wasted_steps(result: dict) -> list[int]:
    """Per failure or preemption: how many completed steps the next attempt recomputed."""
    attempts, lost = result["attempts"], []
    for k in range(len(attempts) - 1):
        stop = resumed_from(attempts[k + 1])
        lost.append(sum(1 for e in events(attempts[k]) if e["event"] == "step" and e["step"] > stop))
    return lost


def against_control(result: dict, reference: dict, steps: int) -> dict:
    """The stitched path against the uninterrupted control (`control.compare_steps`): steps 1..`steps` exactly
    once, IDs exact, losses and weights in float32 tolerance."""
    kept = path(result)
    numbers = [e["step"] for e in kept]
    if numbers != list(range(1, steps + 1)):
        return {"matches": False, "reason": f"steps {numbers} are not 1..{steps} exactly once", "steps": numbers}
    return control.compare_steps(kept, reference)


def goodput(result: dict) -> dict:
    """Seconds per part of the wall time (PARTS), summed over attempts, and the productive fraction.

    `other` is what no part names; `other_after_last_event` is the share of it that came after an attempt's last
    recorded event, less that attempt's detection (waiting for background writes, shutting down, exiting), and
    `other_between_events` the rest (sampling and placing batches, publishing manifests: the gaps between events).
    """
    attempts = result["attempts"]
    parts = dict.fromkeys(PARTS, 0.0)
    after_last, redone_compiled = 0.0, 0  # redone_compiled: recomputed steps counted as compilation
    for k, attempt in enumerate(attempts):
        log = events(attempt)
        stop = resumed_from(attempts[k + 1]) if k + 1 < len(attempts) else None
        ready = next((e["t"] for e in log if e["event"] == "ready"), None)
        end = attempt["event"]["time"]
        parts["startup"] += (ready or end) - attempt["launched"]
        parts["restore"] += sum(e["s"] for e in log if e["event"] == "restored")
        parts["save_block"] += sum(e["block_s"] for e in log if e["event"] == "saved")
        devices = (next((e for e in log if e["event"] == "ready"), {}).get("world") or {}).get("devices", 1)
        seen = set()  # the batch shapes this attempt's update has met
        for e in (e for e in log if e["event"] == "step"):
            rows = batch.padded_length(len(e["ids"]), devices)  # the shape the update is compiled for
            new = rows not in seen
            seen.add(rows)
            if new:  # compiling (or loading from the cache) even if the step is recomputed later
                parts["compile"] += e["s"]
                redone_compiled += stop is not None and e["step"] > stop
            elif stop is not None and e["step"] > stop:
                parts["wasted"] += e["s"]
            else:
                parts["productive"] += e["s"]
        if attempt.get("detect_s"):
            parts["detection"] += attempt["detect_s"]
        if log:
            after_last += max(0.0, end - max(e["t"] for e in log) - (attempt.get("detect_s") or 0.0))
        parts["teardown"] += attempt["teardown_s"]
        wall = end + attempt["teardown_s"] - attempt["launched"]
        parts["other"] += wall
    named = sum(v for k, v in parts.items() if k != "other")
    parts["other"] = max(0.0, parts["other"] - named)
    total = sum(parts.values())
    rounded = {k: round(v, 3) for k, v in parts.items()}
    ending = round(min(after_last, parts["other"]), 3)
    split = {"other_after_last_event": ending, "other_between_events": round(rounded["other"] - ending, 3)}
    return {
        **rounded,
        **split,
        "redone_compiled": redone_compiled,
        "total": round(total, 3),
        "productive_fraction": round(parts["productive"] / total, 4),
    }
