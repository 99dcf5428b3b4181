"""Kill trials against the stage 5 multi-process save path, through stage 5's own drill.

Each trial (`shardlab.multi.drills.kill_during_save`) starts a group of two controller
processes, SIGKILLs one inside a save at a seeded fault point, restarts the group from
the newest step with a completion manifest and compares with a single-process control.
"Exact" here is the drill's comparison: sampler fields identical, weights and momentum
within float32 rounding (the control runs on another device layout).
"""

import time
from collections import Counter

from rig.torture.outcome import BAD, Tally


def classify(result: dict, save_every: int) -> str:
    """refused (interrupted step ignored, previous restored), exact, wrong (accepted a wrong state) or lost."""
    step, accepted = result["interrupted_step"], result["accepted_step"]
    if accepted is None or accepted not in (step, step - save_every):
        return "lost"
    if not (result["restored_equals_control"].get("matches") and result["resumed"].get("matches")):
        return "wrong"
    return "exact" if accepted == step else "refused"


def run(trials: int, folder, seed: int) -> dict:
    """`trials` kill trials with seeds seed*1000+i."""
    from shardlab.multi.drills import SAVE_EVERY, kill_during_save

    started = time.perf_counter()
    tally, spread, records, failed = Tally(), Counter(), [], 0
    for index in range(trials):
        trial_seed = seed * 1000 + index
        tally.trials += 1
        try:
            result = kill_during_save(trial_seed, folder)
        except Exception as exc:  # the drill itself broke: a finding, never a pass
            tally.errors[type(exc).__name__] += 1
            tally.count("unexpected", f"trial {trial_seed}: {type(exc).__name__}: {exc}")
            continue
        plan = result["plan"]
        where = plan["phase"] if plan["hold"] else f"{plan['phase']}+random_delay"
        spread[where] += 1
        outcome = classify(result, SAVE_EVERY)
        tally.count(outcome)
        if outcome in BAD or not result["passed"]:
            failed += not result["passed"]
            tally.note(f"trial {trial_seed} ({where}): {outcome}, drill passed={result['passed']}")
        records.append(
            {
                "trial_seed": trial_seed,
                "kill": where,
                "victim": plan["victim"],
                "interrupted_step": result["interrupted_step"],
                "accepted_step": result["accepted_step"],
                "outcome": outcome,
                "drill_passed": result["passed"],
                "max_weight_diff": result.get("max_weight_diff"),
                "wall_s": result.get("wall_s"),
            }
        )
    out = tally.as_dict()
    out["details"] = {
        "kill_landed_at": dict(spread),
        "drill_failures": failed,
        "trials": records,
        "seconds": round(time.perf_counter() - started, 2),
    }
    out["clean"] = tally.clean and failed == 0
    return out
