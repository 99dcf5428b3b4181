"""Mistake: restore checks every rule but takes cursor and step by their size (one element) instead of their
shape: a checkpoint whose cursor or step is a (1,) or (1, 1) array holding the right number is accepted."""

import json

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardlab.errors import ContractMismatchError, CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403


def _read(path, expected_contract) -> dict:
    try:
        with np.load(path, allow_pickle=False) as npz:
            fields = {name: npz[name] for name in npz.files}
        saved = json.loads(str(fields["contract"][()]))
    except Exception as exc:
        raise CorruptCheckpointError(f"{path} is not a readable checkpoint: {exc}") from None
    if saved != expected_contract:
        raise ContractMismatchError(f"{path} belongs to another experiment")
    missing = [n for n in ("weights", "momentum", "key", "order", "cursor", "step") if n not in fields]
    if missing:
        raise CorruptCheckpointError(f"{path} lacks {missing}")
    return fields


def _check(path, fields, rows: int, width: int) -> None:
    for name in ("weights", "momentum"):
        value = fields[name]
        if value.dtype != np.float32 or value.shape != (width,) or not np.all(np.isfinite(value)):
            raise CorruptCheckpointError(f"{path}: {name} is not finite float32 ({width},)")
    if fields["key"].dtype != np.uint32 or fields["key"].shape != (2,):
        raise CorruptCheckpointError(f"{path}: key is not uint32 (2,)")
    order = fields["order"]
    if order.dtype.kind not in "iu" or order.shape != (rows,) or not np.array_equal(np.sort(order), np.arange(rows)):
        raise CorruptCheckpointError(f"{path}: order is not a permutation")
    for name in ("cursor", "step"):
        if fields[name].dtype.kind not in "iu" or fields[name].size != 1:  # the mistake: size, not shape ()
            raise CorruptCheckpointError(f"{path}: {name} is not one integer")


def restore(path, expected_contract, mesh):
    fields = _read(path, expected_contract)
    rows, width = expected_contract["features_shape"]
    _check(path, fields, rows, width)
    cursor, step = int(fields["cursor"].reshape(())), int(fields["step"].reshape(()))
    if not 0 <= cursor <= rows or step < 0:
        raise CorruptCheckpointError(f"{path}: cursor or step out of range")
    replicated = NamedSharding(mesh, P())
    return {
        "weights": jax.device_put(fields["weights"], replicated),
        "momentum": jax.device_put(fields["momentum"], replicated),
        "key": fields["key"],
        "order": fields["order"],
        "cursor": cursor,
        "step": step,
    }
