"""Correct alternative: a restore without the reference's checksum, checking each course rule in turn."""

import json

import numpy as np

from shardlab.core.state import replicate
from shardlab.errors import ContractMismatchError, CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403

FINITE_FIELDS = ("weights", "momentum")  # non-finite momentum cannot continue the run either


def _read(path):
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except Exception as exc:
        raise CorruptCheckpointError(f"{path} is not a readable NPZ checkpoint: {exc}") from None


def _need(ok, path, what):
    if not ok:
        raise CorruptCheckpointError(f"{path}: {what}; restore another checkpoint")


def restore(path, expected_contract, mesh):
    arrays = _read(path)
    missing = {"weights", "momentum", "key", "order", "cursor", "step", "contract"} - set(arrays)
    _need(not missing, path, f"lacks {sorted(missing)}")
    try:
        found = json.loads(str(arrays["contract"][()]))
    except ValueError:
        raise CorruptCheckpointError(f"{path}: the contract is not JSON") from None
    if found != expected_contract:
        raise ContractMismatchError(f"{path} belongs to another experiment")
    rows, width = expected_contract["features_shape"]
    for name in FINITE_FIELDS:
        value = arrays[name]
        _need(value.dtype == np.float32 and value.shape == (width,), path, f"{name} is not float32 ({width},)")
        _need(bool(np.all(np.isfinite(value))), path, f"{name} is not finite")
    _need(arrays["key"].dtype == np.uint32 and arrays["key"].shape == (2,), path, "key is not uint32 (2,)")
    order = arrays["order"]
    _need(order.dtype.kind in "iu" and order.shape == (rows,), path, f"order is not {rows} integer ids")
    _need(np.array_equal(np.sort(order), np.arange(rows)), path, "order is not a permutation")
    for name in ("cursor", "step"):
        _need(arrays[name].dtype.kind in "iu" and arrays[name].shape == (), path, f"{name} is not one integer")
    _need(0 <= int(arrays["cursor"]) <= rows, path, f"cursor {int(arrays['cursor'])} is outside 0..{rows}")
    _need(int(arrays["step"]) >= 0, path, "step is negative")
    state = {name: arrays[name] for name in ("key", "order")}
    state.update(cursor=int(arrays["cursor"]), step=int(arrays["step"]))
    return {**state, "weights": replicate(arrays["weights"], mesh), "momentum": replicate(arrays["momentum"], mesh)}
