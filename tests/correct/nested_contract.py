"""Correct alternative: the contract is nested JSON ({"data": ..., "run": ...}) stored under another member name."""

import hashlib
import json
import os
import secrets

import numpy as np

from shardlab.core.schema import check, to_arrays
from shardlab.core.state import replicate
from shardlab.errors import CheckpointExistsError, ContractMismatchError, CorruptCheckpointError
from shardlab.learner.reference import *  # noqa: F403


def contract(data, config):
    features, targets = (np.ascontiguousarray(a, np.float32) for a in data)
    digest = hashlib.sha256(features.tobytes() + targets.tobytes()).hexdigest()
    return {
        "version": 2,
        "data": {
            "shapes": [list(features.shape), list(targets.shape)],
            "dtypes": ["float32", "float32"],
            "sha256": digest,
        },
        "run": {
            "seed": int(config.seed),
            "batch_size": int(config.batch_size),
            "width": int(features.shape[1]),
            "optimiser": {"learning_rate": float(config.learning_rate), "momentum": float(config.decay)},
            "devices": int(config.num_devices),
        },
    }


def save(path, state, contract_):
    members = {"experiment_json": np.asarray(json.dumps(contract_, sort_keys=True)), **to_arrays(state)}  # may raise
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(8)}.partial"  # new in every save: a pid alone repeats
    handle = open(tmp, "xb")  # noqa: SIM115  closed by the with below; a failed open created nothing
    try:
        with handle:
            np.savez(handle, **members)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)  # fails if the name exists, even when two savers race
    except FileExistsError:
        raise CheckpointExistsError(f"{path} already exists; use a new path") from None
    finally:
        os.unlink(tmp)
    return path


def restore(path, expected_contract, mesh):
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        found = json.loads(str(arrays.pop("experiment_json")))
    except Exception as exc:
        raise CorruptCheckpointError(f"{path} is not a readable checkpoint: {exc}") from None
    if found != expected_contract:
        raise ContractMismatchError(f"{path} belongs to another experiment: {found} != {expected_contract}")
    missing = {"weights", "momentum", "key", "order", "cursor", "step"} - set(arrays)
    if missing:
        raise CorruptCheckpointError(f"{path} lacks {sorted(missing)}")
    run = expected_contract["run"]
    check(arrays, run["width"], expected_contract["data"]["shapes"][0][0], path)
    state = {**arrays, "cursor": int(arrays["cursor"]), "step": int(arrays["step"])}
    return {**state, "weights": replicate(arrays["weights"], mesh), "momentum": replicate(arrays["momentum"], mesh)}
