"""Stage 4's next optimisation: a hypothesis chosen from the trace, the one change it names, and the verdict.

`next_optimisation` reads what dominates the traced transitions and names ONE change from
`CHANGES` with a numeric threshold: how many milliseconds of the median of one annotation
the change must remove. `changed_loop` builds that change; `verdict` reads a trace taken
after it and says whether the threshold was reached. Both changes keep every sample ID,
loss and weight bit for bit, so the notebook can gate on exact equality before it profiles.
"""

from functools import partial

import jax
import numpy as np

from shardlab.core.batch import next_batch as reference_next_batch
from shardlab.evidence.trace import PREPARE, UPDATE
from shardlab.perf.packed import make_packed_step

SHARES = ("jitted_dispatch_ms", "placement_ms", "other_ms")  # parts of prepare_and_place in trace.breakdown
DISPATCH_SHARE_REMOVED = 0.5  # the one-call reshuffle must remove at least this share of the jitted dispatch time
UPDATE_SHARE_REMOVED = 0.25  # the packed psum must remove at least this share of the update time


@partial(jax.jit, static_argnums=1)
def _split_and_permute(key, num_examples: int):
    key, subkey = jax.random.split(key)
    return key, jax.random.permutation(subkey, num_examples)


def one_call_draw(key, num_examples: int) -> tuple[np.ndarray, np.ndarray]:
    """`core.sampler.draw` (split, keep the first half, permute) as one jitted call and one copy back."""
    key, order = jax.device_get(_split_and_permute(np.asarray(key, np.uint32), num_examples))
    return np.asarray(key, np.uint32), np.asarray(order, np.int32)


CHANGES = {  # change -> the annotation it should shorten, and what it does
    "one_call_reshuffle": (PREPARE, "draw the key split and the permutation in one jitted call (same key, same order)"),
    "packed_psum": (UPDATE, "reduce the count, loss and gradient numerators with one packed psum instead of three"),
}


def _medians(prepare_breakdown: list[dict]) -> dict:
    return {k[: -len("_ms")]: float(np.median([r[k] for r in prepare_breakdown])) for k in SHARES}


def next_optimisation(dominance: dict, prepare_breakdown: list[dict]) -> dict:
    """One falsifiable hypothesis, chosen from what dominates in this trace: change, annotation, threshold, text."""
    prepare, update = dominance[f"median_{PREPARE}_ms"], dominance[f"median_{UPDATE}_ms"]
    parts = _medians(prepare_breakdown)
    if dominance["dominant"] == UPDATE:
        change, baseline = "packed_psum", update
        threshold = UPDATE_SHARE_REMOVED * update
        why = f"the update dominates (median {update:.3f} ms against {prepare:.3f} ms of preparation)"
    else:
        change, baseline = "one_call_reshuffle", prepare
        threshold = DISPATCH_SHARE_REMOVED * parts["jitted_dispatch"]
        why = (
            f"preparation dominates (median {prepare:.3f} ms against {update:.3f} ms for the update); "
            f"inside it, jitted dispatch {parts['jitted_dispatch']:.3f} ms, placement {parts['placement']:.3f} ms, "
            f"other host work {parts['other']:.3f} ms; every traced transition reshuffles, and the reshuffle "
            "is several separate jitted calls"
        )
    annotation, what = CHANGES[change]
    text = (
        f"Observed: {why}.\n"
        f"Change: {what}.\n"
        f"Hypothesis: the median traced {annotation} falls by at least {threshold:.3f} ms "
        f"(from {baseline:.3f} ms), with identical ids, losses and weights.\n"
        "Refuted if the cut is smaller, or if anything differs."
    )
    return {
        "change": change,
        "annotation": annotation,
        "baseline_ms": baseline,
        "threshold_ms": threshold,
        "text": text,
    }


def changed_loop(change: str, mesh, next_batch, make_step):
    """(next_batch, step) of the loop with `change` made; the half it does not touch stays the caller's."""
    if change == "one_call_reshuffle":
        return partial(reference_next_batch, reshuffle=one_call_draw), make_step(mesh)
    if change == "packed_psum":
        return next_batch, make_packed_step(mesh)
    raise ValueError(f"no change named {change!r}; the changes are {sorted(CHANGES)}")


def verdict(hypothesis: dict, unchanged: list[dict], changed: list[dict]) -> dict:
    """Confirmed or refuted, from annotation rows of the unchanged and the changed loop traced side by side."""
    key = f"{hypothesis['annotation']}_ms"
    before = float(np.median([r[key] for r in unchanged]))
    after = float(np.median([r[key] for r in changed]))
    cut = before - after
    confirmed = cut >= hypothesis["threshold_ms"]
    return {
        "annotation": hypothesis["annotation"],
        "median_unchanged_ms": before,
        "median_changed_ms": after,
        "cut_ms": cut,
        "threshold_ms": hypothesis["threshold_ms"],
        "confirmed": bool(confirmed),
        "text": (
            f"{'confirmed' if confirmed else 'refuted'}: median {hypothesis['annotation']} {before:.3f} ms -> "
            f"{after:.3f} ms, a cut of {cut:.3f} ms against the {hypothesis['threshold_ms']:.3f} ms predicted"
        ),
    }
