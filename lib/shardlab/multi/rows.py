"""One drills.json row, whatever the drill: the columns every row has and one entry per failed attempt.

Every drill (a hand restart, a supervised scenario, a launch check) returns `row(...)`; its
own evidence rides along as extra keys. drills.json's `table` is `table(row)` of each: a
projection of the same columns, never a second reading of the drill's own keys.
"""

COLUMNS = (
    "drill",
    "passed",
    "world_sizes",
    "launch",
    "failures",
    "detect_s",
    "restarts",
    "resumed_from",
    "steps_lost",
    "max_weight_diff",
    "ids_equal",
    "goodput",
    "wall_s",
)
TABLE = ("drill", "passed", "launch", "what", "cause", *COLUMNS[5:-1])  # drills.json's summary table


def failure(k: int, attempt: dict, **found) -> dict:
    """Attempt k's failure: the fault planted (victim, phase, step, signal), what the supervisor saw, and
    the scenario's findings (`bound_s`, `resumed_from`, `steps_lost`, `checks`; None where not judged)."""
    event, fault = attempt["event"], attempt.get("fault") or {}
    return {
        "attempt": k,
        "victim": fault.get("rank"),
        "process": event.get("process"),
        "phase": fault.get("phase"),
        "at_step": fault.get("step"),
        "signal": fault.get("signal"),
        "kind": event["kind"],
        "cause": event.get("cause"),
        "detect_s": attempt.get("detect_s"),
        "exit_codes": dict(attempt.get("exit_codes") or {}),  # every process's, after the teardown
        "port": attempt["port"],
        **dict.fromkeys(("bound_s", "resumed_from", "steps_lost")),
        "checks": {},
        **found,
    }


def row(drill: str, passed, world_sizes, *, compared: dict | list | None = None, **columns) -> dict:
    """A drills.json row: COLUMNS (None or empty where a drill has no such number), then the drill's own keys.

    `compared` is a comparison with the control ({max_weight_diff, ids_equal, ...}), or a list of them for a
    drill of several runs; the largest weight difference and whether every run's IDs were equal fill those
    columns, None where a comparison has no such number (it stopped before comparing).
    """
    found = compared if isinstance(compared, list) else [compared or {}]
    diffs, ids = [c.get("max_weight_diff") for c in found], [c.get("ids_equal") for c in found]
    base = dict.fromkeys(COLUMNS)
    base.update(drill=drill, passed=bool(passed), world_sizes=list(world_sizes), launch="explicit", failures=[])
    base.update(
        restarts=0,
        max_weight_diff=None if not diffs or None in diffs else max(diffs),
        ids_equal=None if not ids or None in ids else all(ids),
    )
    return {**base, **columns}


def _what(entry: dict) -> str:
    """'SIGNAL pP @PHASE:STEP' of one failure (the process that stopped, for a failure without a planted fault)."""
    who = entry["victim"] if entry["victim"] is not None else entry["process"]
    where = entry["phase"] or "?"
    step = entry["at_step"]
    return f"{entry['signal'] or 'fault'} p{who} @{where}" + (f":{step}" if step is not None else "")


def table(found: dict) -> dict:
    """The summary columns of one row."""
    failures = found["failures"]
    derived = {"what": [_what(f) for f in failures], "cause": [f["cause"] for f in failures]}
    return {k: derived[k] if k in derived else found[k] for k in TABLE}
