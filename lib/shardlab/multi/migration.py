"""The world-size migration contract: the one deliberate exception to "the contract must match".

Default (`allow_world_change=False`): stage 3's `check_contract`, which refuses any
difference, a device-count change included. With `allow_world_change=True` every field
but `num_devices` must still match, and the restore may land on a mesh of another size.

Why this is legal here, and only for this field:
- weights and momentum are replicated, so every world size holds the same full values;
- key, order and cursor are host state, identical on every controller, so the same IDs
  follow in the same groups (batch size is still pinned: a new batch size is a new experiment);
- the update divides the psum of numerators by the psum of valid counts: the global N.
  Padding to a multiple of the new device count adds mask-0 slots that contribute zero,
  so a step's loss and gradient do not depend on how its rows are split. Only the order
  of floating-point additions changes: weights agree within float32 tolerance, IDs exactly.
  (Averaging per-device means instead would make the result depend on the world size.)
"""

import numpy as np

from shardlab.core.batch import pad
from shardlab.core.checkpoint import check_contract
from shardlab.core.update import local_sums

FIELD = "num_devices"


def check(found: dict, expected: dict, allow_world_change: bool = False) -> dict:
    """Raise ContractMismatchError unless `found` may continue as `expected`; return the migration record."""
    if not allow_world_change:
        check_contract(found, expected)
    else:
        check_contract(
            {k: v for k, v in found.items() if k != FIELD}, {k: v for k, v in expected.items() if k != FIELD}
        )
    return {
        "contract": "world-size migration" if allow_world_change else "default (continuation)",
        "from_devices": found.get(FIELD),
        "to_devices": expected.get(FIELD),
        "migrated": found.get(FIELD) != expected.get(FIELD),
    }


def split_invariance(data, ids, weights, device_counts=(1, 2, 4)) -> dict:
    """One batch's loss split over each device count: global mean (invariant) vs mean of device means."""
    out = {}
    for n in device_counts:
        blocks = [np.split(np.asarray(a), n) for a in pad(data, ids, n)]
        sums = [local_sums(f, t, m, np.asarray(weights, np.float32)) for f, t, m in zip(*blocks)]
        counts = np.array([float(s[0]) for s in sums])
        losses = np.array([float(s[2]) for s in sums])
        held = counts > 0
        out[n] = {
            "valid_per_device": counts.astype(int).tolist(),
            "global_mean": float(losses.sum() / counts.sum()),
            "mean_of_device_means": float(np.mean(losses[held] / counts[held])),
        }
    return out
