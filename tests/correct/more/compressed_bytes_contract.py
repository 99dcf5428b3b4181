"""Correct alternative: a compressed NPZ whose contract is UTF-8 bytes under "meta" and whose order is int64.

Its version sits under "layout_version", its shapes and dtypes in lists (plain JSON data: a tuple would
come back from JSON as a list, so the same experiment's contract would differ in a fresh process);
restore compares contracts as canonical JSON text and returns the order as int32, the dtype the state holds.
"""

import hashlib
import json
import os
import secrets

import numpy as np

from shardlab.core.state import replicate
from shardlab.errors import CheckpointExistsError, ContractMismatchError, CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403

FIELDS = ("weights", "momentum", "key", "order", "cursor", "step")


def contract(data, config):
    features, targets = (np.ascontiguousarray(a) for a in data)
    digest = hashlib.sha256()
    for arr in (features, targets):
        digest.update(f"{arr.dtype.str}{arr.shape}".encode() + arr.tobytes())
    return {
        "layout_version": 1,
        "rows_cols": [int(n) for n in features.shape],
        "dtypes": [features.dtype.str, targets.dtype.str],
        "digest": digest.hexdigest(),
        "hyper": {
            "seed": int(config.seed),
            "batch": int(config.batch_size),
            "lr": float(config.learning_rate),
            "decay": float(config.decay),
            "devices": int(config.num_devices),
        },
    }


def _text(contract_) -> str:
    return json.dumps(contract_, sort_keys=True)


def save(path, state, contract_):
    path = os.fspath(path)
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} already exists; checkpoints are never overwritten")
    members = {
        "weights": np.asarray(state["weights"], np.float32),
        "momentum": np.asarray(state["momentum"], np.float32),
        "key": np.asarray(state["key"], np.uint32),
        "order": np.asarray(state["order"], np.int64),
        "cursor": np.asarray(int(state["cursor"]), np.int64),
        "step": np.asarray(int(state["step"]), np.int64),
        "meta": np.frombuffer(_text(contract_).encode(), np.uint8),
    }
    tmp = os.path.join(
        os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.{os.getpid()}.{secrets.token_hex(8)}.part"
    )
    handle = open(tmp, "xb")  # noqa: SIM115 (closed by the with block inside the try that removes it)
    try:
        with handle:
            np.savez_compressed(handle, **members)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)
    except FileExistsError:
        raise CheckpointExistsError(f"{path} already exists; checkpoints are never overwritten") from None
    finally:
        os.unlink(tmp)
    return path


def _field(arrays, name, dtype, shape, path):
    value = arrays.get(name)
    if value is None:
        raise CorruptCheckpointError(f"{path} lacks {name}")
    if value.dtype.str != np.dtype(dtype).str or value.shape != shape:
        raise CorruptCheckpointError(
            f"{path}: {name} is {value.dtype.str}{value.shape}, not {np.dtype(dtype).str}{shape}"
        )
    return value


def restore(path, expected_contract, mesh):
    try:
        with np.load(os.fspath(path), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        found = bytes(arrays["meta"].astype(np.uint8)).decode()
        json.loads(found)
    except Exception as exc:
        raise CorruptCheckpointError(f"{path} is not a readable checkpoint ({type(exc).__name__}: {exc})") from None
    if found != _text(expected_contract):
        raise ContractMismatchError(f"{path} is another experiment: {found} is not {_text(expected_contract)}")
    rows, width = expected_contract["rows_cols"]
    weights = _field(arrays, "weights", np.float32, (width,), path)
    momentum = _field(arrays, "momentum", np.float32, (width,), path)
    key = _field(arrays, "key", np.uint32, (2,), path)
    order = _field(arrays, "order", np.int64, (rows,), path)
    cursor, step = (int(_field(arrays, name, np.int64, (), path)) for name in ("cursor", "step"))
    if not (np.all(np.isfinite(weights)) and np.all(np.isfinite(momentum))):
        raise CorruptCheckpointError(f"{path}: weights or momentum are not finite")
    if not np.array_equal(np.sort(order), np.arange(rows)):
        raise CorruptCheckpointError(f"{path}: order is not a permutation of 0..{rows - 1}")
    if not 0 <= cursor <= rows or step < 0:
        raise CorruptCheckpointError(f"{path}: cursor {cursor} outside [0, {rows}] or step {step} negative")
    return {
        "weights": replicate(weights, mesh),
        "momentum": replicate(momentum, mesh),
        "key": key,
        "order": order.astype(np.int32),
        "cursor": cursor,
        "step": step,
    }
