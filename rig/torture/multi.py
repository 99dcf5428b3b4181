"""Kill trials against the stage 5 multi-process save path, through stage 5's own drill.

Each trial (`trial`, through stage 5's drill `shardlab.multi.drills.kill_during_save`) starts a
group of two controller processes, SIGKILLs one inside a save at a seeded fault point, restarts
the group from the newest step with a completion manifest and compares with a single-process control.
"Exact" here is the drill's comparison: sampler fields identical, weights and momentum
within float32 rounding (the control runs on another device layout).
"""

import os
import time
from collections import Counter

import numpy as np

from rig.torture.outcome import BAD, Tally


def _fresh(out: str, name: str) -> str:
    """A new folder name under `out` (a trial may be repeated into the same folder)."""
    n = 0
    while os.path.exists(os.path.join(out, f"{name}-{n}")):
        n += 1
    return f"{name}-{n}"


def trial(trial_seed: int, out_dir) -> dict:
    """One randomised kill against the stage 5 save path; returns the accepted step and the comparisons.

    `trial_seed` draws the save step (6 or 9), the fault point and the victim: before its
    pieces ('save-begin', held), at a random 0-0.6 s delay into the save ('save-begin',
    not held: the kill lands anywhere in Orbax's write), after Orbax finalised but before
    the manifest ('save-written'), or process 0 just before publishing ('publish'; JAX
    itself then aborts the other process, so no named error is required). Passed means:
    the accepted step is the interrupted one only if its manifest was published, else the
    previous one; the restored state and the resumed run equal the control.
    """
    from shardlab.multi import drills

    rng = np.random.default_rng(trial_seed)
    phase, hold = [("save-begin", True), ("save-begin", False), ("save-written", True), ("publish", True)][
        int(rng.integers(4))
    ]
    plan = {
        "save_step": int(rng.choice([6, 9])),
        "phase": phase,
        "hold": hold,
        "victim": 0 if phase == "publish" else int(rng.integers(2)),
        "delay": 0.0 if hold else round(float(rng.uniform(0.0, 0.6)), 3),
    }
    ctx = drills.context(out_dir)
    result = drills.kill_during_save(ctx, _fresh(ctx.out, f"trial-{trial_seed}"), plan)
    # the drill's verdict asks for the step before and for the victim named; a random kill point may land after the
    # manifest was published (then that step is rightly accepted) or in process 0 (JAX aborts the other one first)
    step = plan["save_step"]
    result["passed"] = bool(drills.restart_ok(result) and result["accepted_step"] in {step - drills.SAVE_EVERY, step})
    return {"trial_seed": trial_seed, "plan": plan, **result}


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
    from shardlab.multi.drills import SAVE_EVERY

    started = time.perf_counter()
    tally, spread, records, failed = Tally(), Counter(), [], 0
    for index in range(trials):
        trial_seed = seed * 1000 + index
        tally.trials += 1
        try:
            result = trial(trial_seed, folder)
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
