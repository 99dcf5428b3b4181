"""The uninterrupted single-process control, and comparisons of controller reports against it.

The control is stage 2's own path (`sl.initial`, `sl.transition`) on four logical devices
in this interpreter: no launcher, no jax.distributed, no checkpoint. Sample IDs and
sampler fields must match exactly; losses, weights and momentum within float32 tolerance
(another world size adds the same numbers in another order).
"""

import numpy as np

from shardlab.core.config import NUM_DEVICES
from shardlab.core.schema import SAMPLER
from shardlab.verify.replay import max_diff

RTOL, ATOL = 1e-5, 1e-6  # float32 tolerance for losses, weights and momentum


def run(seed: int, batch_size: int, steps: int, num_devices: int = NUM_DEVICES) -> dict:
    """Per completed step: ids and loss; and the host state after every step (step 0 included)."""
    import shardlab as sl

    sl.setup_devices(num_devices)
    mesh, data = sl.make_mesh(num_devices), sl.teaching_fixture()
    step = sl.make_step(mesh)
    state = sl.initial(seed, data, mesh)
    states, ids, losses = [sl.host_copy(state)], {}, {}
    for _ in range(steps):
        state, loss, batch_ids = sl.transition(state, data, batch_size, step, mesh)
        ids[state["step"]], losses[state["step"]] = [int(i) for i in batch_ids], float(loss)
        states.append(sl.host_copy(state))
    return {"ids": ids, "losses": losses, "states": states, "devices": num_devices}


def state_matches(found: dict | None, reference: dict) -> dict:
    """A plain state (lists) against a control host state: sampler exact, weights/momentum within tolerance."""
    if not found:
        return {"matches": False, "reason": "no state recorded"}
    sampler_equal = all(np.array_equal(np.asarray(found[f]), np.asarray(reference[f])) for f in SAMPLER)
    diffs = {f"max_{f}_diff": max_diff(found[f], reference[f]) for f in ("weights", "momentum")}
    close = all(np.allclose(found[f], reference[f], rtol=RTOL, atol=ATOL) for f in ("weights", "momentum"))
    return {"matches": bool(sampler_equal and close), "sampler_equal": bool(sampler_equal), **diffs}


def compare_steps(entries: list[dict], reference: dict, weights: str = "weights") -> dict:
    """Logged steps (each with its step, ids, loss and weight values under `weights`) against the control:
    IDs exact, losses and weights within float32 tolerance."""
    steps = [e["step"] for e in entries]
    ids_equal = all(e["ids"] == reference["ids"][s] for e, s in zip(entries, steps))
    losses, ref_losses = [e["loss"] for e in entries], [reference["losses"][s] for s in steps]
    values, ref_values = [e[weights] for e in entries], [reference["states"][s]["weights"] for s in steps]
    close = np.allclose(losses, ref_losses, rtol=RTOL, atol=ATOL) and np.allclose(
        values, ref_values, rtol=RTOL, atol=ATOL
    )
    return {
        "matches": bool(ids_equal and close),
        "steps": [steps[0], steps[-1]],
        "ids_equal": bool(ids_equal),
        "max_loss_diff": max_diff(losses, ref_losses),
        "max_weight_diff": max_diff(values, ref_values),
    }


def compare(report: dict | None, reference: dict, need_final: bool = True) -> dict:
    """One process's logged steps against the control (`compare_steps`), and its final state if it wrote one."""
    if not report or not report.get("log"):
        return {"matches": False, "reason": "no report or empty log", "steps": []}
    result = compare_steps(report["log"], reference, "weights_values")  # the log's "weights" is a checksum
    final = report.get("final")
    if final:
        result["final"] = state_matches(final, reference["states"][final["step"]])
    result["matches"] = result["matches"] and bool(result.get("final", {}).get("matches") or not need_final)
    return result


def errors(outcome: dict) -> dict:
    """Process id -> {type, message} for every process that recorded an error."""
    return {
        pid: {"type": r["error"]["type"], "message": r["error"]["message"]}
        for pid, r in outcome["reports"].items()
        if r and r.get("error")
    }
