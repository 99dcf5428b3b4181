# ruff: noqa: E501
"""WRONG (restore_casts_momentum_dtype, stage 3): Casts the momentum to float32 before the layout check ('any float precision will do').

Course rule violated: check dtypes: momentum is float32 (native byte order), never silently converted.
Smallest exposing configuration: a checkpoint whose momentum is float64 (or big-endian '>f4'): accepted and cast.
Right on the common configuration (seed 17, batch 7, 23 rows, 4 devices, lr 0.03, decay 0.8).
"""

import hashlib
import json
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shardlab import errors
from shardlab.core.batch import Batch
from shardlab.core.config import DECAY, LEARNING_RATE, Config

AXIS = "data"
FIELDS = ("weights", "momentum", "key", "order", "cursor", "step")


def _replicate(values, mesh):
    return jax.device_put(np.asarray(values, np.float32), NamedSharding(mesh, P()))


def _draw(key, n):
    key, subkey = jax.random.split(key)
    return np.asarray(key, np.uint32), np.asarray(jax.random.permutation(subkey, n), np.int32)


# ---------------------------------------------------------------- stage 1


def initial(seed: int, data, mesh: Mesh) -> dict:
    features, _ = data
    rows, width = np.shape(features)
    key, order = _draw(jax.random.PRNGKey(seed), rows)
    zeros = np.zeros(width, np.float32)
    return {
        "weights": _replicate(zeros, mesh),
        "momentum": _replicate(zeros, mesh),
        "key": key,
        "order": order,
        "cursor": 0,
        "step": 0,
    }


def next_batch(state: dict, data, batch_size: int, mesh: Mesh) -> tuple[dict, Batch]:
    features, targets = (np.asarray(a, np.float32) for a in data)
    key, order, cursor = state["key"], state["order"], int(state["cursor"])
    rows = len(order)
    if cursor >= rows:
        key, order = _draw(key, rows)
        cursor = 0
    ids = np.array(order[cursor : cursor + batch_size], dtype=np.int32)
    devices = mesh.size
    slots = -(-len(ids) // devices) * devices
    x = np.zeros((slots, features.shape[1]), np.float32)
    y = np.zeros(slots, np.float32)
    m = np.zeros(slots, np.float32)
    x[: len(ids)], y[: len(ids)], m[: len(ids)] = features[ids], targets[ids], 1.0
    batch = Batch(
        jax.device_put(x, NamedSharding(mesh, P(AXIS, None))),
        jax.device_put(y, NamedSharding(mesh, P(AXIS))),
        jax.device_put(m, NamedSharding(mesh, P(AXIS))),
        ids,
    )
    return {**state, "key": key, "order": order, "cursor": cursor + len(ids)}, batch


# ---------------------------------------------------------------- stage 2


def _body(features, targets, mask, weights, momentum, *, learning_rate, decay):
    valid = mask > 0
    residual = jnp.where(valid, features @ weights - targets, 0.0)
    count = jax.lax.psum(jnp.sum(valid.astype(jnp.float32)), AXIS)
    grad_num = jax.lax.psum(2.0 * (residual @ jnp.where(valid[:, None], features, 0.0)), AXIS)
    loss_num = jax.lax.psum(jnp.sum(residual * residual), AXIS)
    grad, loss = grad_num / count, loss_num / count
    momentum = decay * momentum + grad
    return weights - learning_rate * momentum, momentum, loss, grad


def _mapped(mesh, learning_rate, decay):
    def body(features, targets, mask, weights, momentum):
        return _body(features, targets, mask, weights, momentum, learning_rate=learning_rate, decay=decay)

    return jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(P(AXIS, None), P(AXIS), P(AXIS), P(), P()),
        out_specs=(P(), P(), P(), P()),
    )


def make_step(mesh: Mesh, learning_rate: float = LEARNING_RATE, decay: float = DECAY, compiled: bool = True):
    mapped = _mapped(mesh, float(learning_rate), float(decay))
    return jax.jit(mapped) if compiled else mapped


def transition(state: dict, data, batch_size: int, step, mesh: Mesh) -> tuple[dict, float, np.ndarray]:
    state, batch = next_batch(state, data, batch_size, mesh)
    weights, momentum, loss, _ = step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])
    return {**state, "weights": weights, "momentum": momentum, "step": int(state["step"]) + 1}, float(loss), batch.ids


# ---------------------------------------------------------------- stage 3


def _fingerprint(features, targets) -> str:
    digest = hashlib.sha256()
    for arr in (features, targets):
        digest.update(f"{arr.dtype.str}{arr.shape}".encode())
        digest.update(np.ascontiguousarray(arr).tobytes())
    return digest.hexdigest()


def contract(data, config: Config) -> dict:
    features, targets = (np.asarray(a, np.float32) for a in data)
    return {
        "schema_version": 1,
        "features_shape": list(features.shape),
        "features_dtype": features.dtype.str,
        "targets_shape": list(targets.shape),
        "targets_dtype": targets.dtype.str,
        "data_sha256": _fingerprint(features, targets),
        "seed": int(config.seed),
        "batch_size": int(config.batch_size),
        "num_features": int(features.shape[1]),
        "learning_rate": float(config.learning_rate),
        "decay": float(config.decay),
        "num_devices": int(config.num_devices),
    }


def _arrays(state: dict) -> dict:
    return {
        "weights": np.asarray(state["weights"], np.float32),
        "momentum": np.asarray(state["momentum"], np.float32),
        "key": np.asarray(state["key"], np.uint32),
        "order": np.asarray(state["order"], np.int32),
        "cursor": np.asarray(int(state["cursor"]), np.int64),
        "step": np.asarray(int(state["step"]), np.int64),
    }


def save(path, state: dict, contract_: dict) -> str:
    path = os.fspath(path)
    if os.path.lexists(path):
        raise errors.CheckpointExistsError(f"{path} already exists; checkpoints are never overwritten")
    folder = os.path.dirname(os.path.abspath(path))
    arrays = {**_arrays(state), "contract": np.asarray(json.dumps(contract_, sort_keys=True))}
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **arrays)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)
    except FileExistsError:
        raise errors.CheckpointExistsError(f"{path} appeared while saving; nothing was overwritten") from None
    finally:
        os.unlink(tmp)
    return path


def _bad(path, what):
    return errors.CorruptCheckpointError(f"{path}: {what}")


def _check_contract(path, found, expected):
    if found != expected:
        raise errors.ContractMismatchError(f"{path} belongs to another experiment: {found} != {expected}")


def _check_fields(path, arrays, expected):
    rows, width = expected["features_shape"][0], expected["num_features"]
    layout = {
        "weights": (np.float32, (width,)),
        "momentum": (np.float32, (width,)),
        "key": (np.uint32, (2,)),
        "order": (np.int32, (rows,)),
        "cursor": (np.int64, ()),
        "step": (np.int64, ()),
    }
    for name, (dtype, shape) in layout.items():
        arr = arrays[name]
        if arr.dtype.str != np.dtype(dtype).str or arr.shape != shape:
            raise _bad(path, f"{name} should be {np.dtype(dtype)}{shape}, found {arr.dtype.str}{arr.shape}")
    for name in ("weights", "momentum"):
        if not np.all(np.isfinite(arrays[name])):
            raise _bad(path, f"{name} hold non-finite values")
    if not np.array_equal(np.sort(arrays["order"]), np.arange(rows)):
        raise _bad(path, "order is not a permutation of every sample id")
    if not 0 <= int(arrays["cursor"]) <= rows:
        raise _bad(path, f"cursor {int(arrays['cursor'])} outside [0, {rows}]")
    if int(arrays["step"]) < 0:
        raise _bad(path, f"step {int(arrays['step'])} is negative")


def restore(path, expected_contract: dict, mesh: Mesh) -> dict:
    path = os.fspath(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        found = json.loads(str(arrays.pop("contract")[()]))
    except Exception as exc:
        raise _bad(path, f"not a readable checkpoint ({type(exc).__name__}: {exc})") from None
    _check_contract(path, found, expected_contract)
    missing = [name for name in FIELDS if name not in arrays]
    if missing:
        raise _bad(path, f"lacks {missing}")
    _check_fields(path, arrays, expected_contract)
    return {
        "weights": _replicate(arrays["weights"], mesh),
        "momentum": _replicate(arrays["momentum"], mesh),
        "key": arrays["key"],
        "order": arrays["order"],
        "cursor": int(arrays["cursor"]),
        "step": int(arrays["step"]),
    }
