"""Stage 4's next optimisation, stated as a falsifiable hypothesis chosen from what the trace shows."""

import numpy as np

SHARES = ("jitted_dispatch_ms", "placement_ms", "other_ms")  # parts of prepare_and_place in trace.breakdown


def next_optimisation(dominance: dict, prepare_breakdown: list[dict]) -> str:
    """One falsifiable hypothesis, chosen from what dominates in this trace."""
    prepare, update = dominance["median_prepare_and_place_ms"], dominance["median_compiled_update_and_wait_ms"]
    if dominance["dominant"] == "compiled_update_and_wait":
        return (
            f"The update dominates here (median {update:.3f} ms against {prepare:.3f} ms of preparation). "
            "Hypothesis: on this small workload the four-device executable pays for three all-reduces between "
            "logical devices sharing the same cores; replacing the three psums by one packed psum "
            "(shardlab.perf.packed) cuts the median traced compiled_update_and_wait of the next four transitions "
            "by at least a quarter, with losses and weights equal to float32 rounding. Falsified if the cut is "
            "smaller, or any id or loss differs beyond rounding."
        )
    parts = {k[: -len("_ms")]: float(np.median([r[k] for r in prepare_breakdown])) for k in SHARES}
    split = ", ".join(f"{k} {v:.3f} ms" for k, v in parts.items())
    dispatched = sorted({name for row in prepare_breakdown for name in row["dispatched"]})
    evidence = (
        f"Preparation dominates here (median {prepare:.3f} ms against {update:.3f} ms for the update). "
        f"Inside prepare_and_place the trace shows (medians) {split}; the jitted calls inside are "
        f"{', '.join(dispatched) or 'none'}. 'other' is host time the trace does not name (Python around the "
        "sampler's jax.random calls, copying the new key and order back to NumPy, padding). "
    )
    if parts["placement"] > parts["jitted_dispatch"] + parts["other"]:
        return evidence + (
            "Hypothesis: placement is the cost; keeping the dataset on the devices and moving only the selected "
            "int32 ids per step (shardlab.perf.resident) cuts the median traced prepare_and_place of the next four "
            "transitions by at least a third, with the same ids and losses equal to float32 rounding. "
            "Falsified if the cut is smaller or any id differs."
        )
    return evidence + (
        "Hypothesis: most of it is the epoch reshuffle, which happens in every traced transition at this batch "
        "size; drawing key split and permutation in one jitted call (same key, same order) cuts the median "
        "traced prepare_and_place of the next four transitions by at least a quarter, with bit-identical ids, "
        "losses and weights. Falsified if the cut is smaller or anything differs; a trace at a batch size that "
        "does not reshuffle every step is the control."
    )
