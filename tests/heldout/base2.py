# ruff: noqa
# fmt: off
"""My shardlab implementation (a complete learner file)."""

import hashlib
import json
import os
import tempfile
import zipfile

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


def _data(data):
    """(features, targets) as float32 arrays, refused with DataError when unusable."""
    try:
        features, targets = data
    except (TypeError, ValueError):
        raise errors.DataError("data must be a (features, targets) pair") from None
    features, targets = np.asarray(features), np.asarray(targets)
    if features.ndim != 2 or targets.ndim != 1 or features.shape[0] != targets.shape[0]:
        raise errors.DataError(f"features {features.shape} and targets {targets.shape} do not fit together")
    if features.size == 0:
        raise errors.DataError("the dataset is empty")
    if not (np.all(np.isfinite(features)) and np.all(np.isfinite(targets))):
        raise errors.DataError("the data hold non-finite values; clean them first")
    return features.astype(np.float32), targets.astype(np.float32)


def _check_batch_size(batch_size):
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise errors.ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
    return int(batch_size)


def _replicate(values, mesh):
    return jax.device_put(np.asarray(values, np.float32), NamedSharding(mesh, P()))


def _draw(key, n):
    key, subkey = jax.random.split(key)
    order = jax.random.permutation(subkey, n)
    return np.asarray(key, np.uint32), np.asarray(order, np.int32)


# ---------------------------------------------------------------- stage 1


def initial(seed: int, data, mesh: Mesh) -> dict:
    """State at step 0: zero weights and momentum, a split key and the first order."""
    features, _ = _data(data)
    n, d = features.shape
    key, order = _draw(jax.random.PRNGKey(seed), n)
    zeros = np.zeros(d, np.float32)
    return {"weights": _replicate(zeros, mesh), "momentum": _replicate(zeros, mesh),
            "key": key, "order": order, "cursor": 0, "step": 0}


def _pad(features, targets, ids, num_devices):
    rows = len(ids)
    if rows == 0:
        raise errors.EmptyBatchError("the batch selects no rows")
    slots = -(-rows // num_devices) * num_devices
    f = np.zeros((slots, features.shape[1]), np.float32)
    t = np.zeros(slots, np.float32)
    m = np.zeros(slots, np.float32)
    f[:rows] = features[ids]
    t[:rows] = targets[ids]
    m[:rows] = 1.0
    return f, t, m


def _place(f, t, m, mesh):
    rows, values = NamedSharding(mesh, P(AXIS, None)), NamedSharding(mesh, P(AXIS))
    return jax.device_put(f, rows), jax.device_put(t, values), jax.device_put(m, values)


def next_batch(state: dict, data, batch_size: int, mesh: Mesh) -> tuple[dict, Batch]:
    """Return (new state, placed batch): advance the sampler, pad, place. Step is unchanged."""
    batch_size = _check_batch_size(batch_size)
    features, targets = _data(data)
    key, order, cursor = state["key"], state["order"], int(state["cursor"])
    if cursor >= len(order):
        key, order = _draw(key, len(order))
        cursor = 0
    ids = np.array(order[cursor : cursor + batch_size], dtype=np.int32)
    f, t, m = _pad(features, targets, ids, mesh.size)
    new = {**state, "key": key, "order": order, "cursor": cursor + len(ids)}
    return new, Batch(*_place(f, t, m, mesh), ids)


# ---------------------------------------------------------------- stage 2


def _body(features, targets, mask, weights, momentum, *, learning_rate, decay):
    valid = mask > 0
    residual = jnp.where(valid, features @ weights - targets, 0.0)
    count = jnp.sum(valid.astype(jnp.float32))
    grad_num = 2.0 * (residual @ jnp.where(valid[:, None], features, 0.0))
    loss_num = jnp.sum(residual * residual)
    count = jax.lax.psum(count, AXIS)
    grad_num = jax.lax.psum(grad_num, AXIS)
    loss_num = jax.lax.psum(loss_num, AXIS)
    grad = grad_num / count
    loss = loss_num / count
    momentum = decay * momentum + grad
    return weights - learning_rate * momentum, momentum, loss, grad


def make_step(mesh: Mesh, learning_rate: float = LEARNING_RATE, decay: float = DECAY, compiled: bool = True):
    """Return step(features, targets, mask, weights, momentum) -> (weights, momentum, loss, grad)."""
    learning_rate, decay = float(learning_rate), float(decay)

    def body(features, targets, mask, weights, momentum):
        return _body(features, targets, mask, weights, momentum, learning_rate=learning_rate, decay=decay)

    mapped = jax.shard_map(
        body, mesh=mesh,
        in_specs=(P(AXIS, None), P(AXIS), P(AXIS), P(), P()),
        out_specs=(P(), P(), P(), P()),
    )
    return jax.jit(mapped) if compiled else mapped


def transition(state: dict, data, batch_size: int, step, mesh: Mesh) -> tuple[dict, float, np.ndarray]:
    """Return (new state, pre-update loss, ids): one batch, one optimiser update, step + 1."""
    state, batch = next_batch(state, data, batch_size, mesh)
    weights, momentum, loss, _ = step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])
    new = {**state, "weights": weights, "momentum": momentum, "step": int(state["step"]) + 1}
    return new, float(loss), batch.ids


# ---------------------------------------------------------------- stage 3

SCHEMA = 1


def _data_sha256(features, targets):
    digest = hashlib.sha256()
    for arr in (features, targets):
        digest.update(f"{arr.dtype.str}{arr.shape}".encode())
        digest.update(np.ascontiguousarray(arr).tobytes())
    return digest.hexdigest()


def contract(data, config: Config) -> dict:
    """Everything that must match for a checkpoint to continue *this* experiment."""
    features, targets = _data(data)
    return {
        "schema_version": SCHEMA,
        "features_shape": list(features.shape),
        "features_dtype": features.dtype.str,
        "targets_shape": list(targets.shape),
        "targets_dtype": targets.dtype.str,
        "data_sha256": _data_sha256(features, targets),
        "seed": int(config.seed),
        "batch_size": int(config.batch_size),
        "num_features": int(features.shape[1]),
        "learning_rate": float(config.learning_rate),
        "decay": float(config.decay),
        "num_devices": int(config.num_devices),
    }


def _host(state):
    return {
        "weights": np.asarray(state["weights"], np.float32),
        "momentum": np.asarray(state["momentum"], np.float32),
        "key": np.asarray(state["key"], np.uint32),
        "order": np.asarray(state["order"], np.int32),
        "cursor": np.asarray(int(state["cursor"]), np.int64),
        "step": np.asarray(int(state["step"]), np.int64),
    }


def save(path, state: dict, contract_: dict) -> str:
    """Write all six fields plus the contract to a new NPZ at `path`; return the path."""
    path = os.fspath(path)
    if os.path.lexists(path):
        raise errors.CheckpointExistsError(f"{path} exists; checkpoints are never overwritten")
    arrays = {**_host(state), "contract": np.asarray(json.dumps(contract_, sort_keys=True))}
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".ckpt-{os.getpid()}-", suffix=".npz", dir=folder)
    except OSError as exc:
        raise errors.CheckpointWriteError(f"cannot write into {folder}: {exc}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **arrays)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)
    except FileExistsError:
        raise errors.CheckpointExistsError(f"{path} appeared while saving; nothing overwritten") from None
    except OSError as exc:
        raise errors.CheckpointWriteError(f"writing {path} failed: {exc}") from None
    finally:
        os.unlink(tmp)
    return path


def _load(path):
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except Exception as exc:  # not a zip, truncated, bad CRC, pickled members, a folder...
        raise errors.CorruptCheckpointError(f"{path} is not a readable checkpoint ({type(exc).__name__}: {exc})") from None


def _check_contract(arrays, expected, path):
    if "contract" not in arrays:
        raise errors.CorruptCheckpointError(f"{path} holds no contract")
    try:
        found = json.loads(str(arrays["contract"][()]))
    except Exception:
        raise errors.CorruptCheckpointError(f"{path}: the contract is not JSON") from None
    if found != expected:
        raise errors.ContractMismatchError(f"{path} belongs to another experiment: {found} != {expected}")


def _integer(arrays, name, path):
    value = arrays[name]
    if value.shape != () or value.dtype.kind not in "iu":
        raise errors.CorruptCheckpointError(f"{path}: {name} must be one integer, found {value.dtype}{value.shape}")
    return int(value)


def _check_fields(arrays, expected, path):
    missing = [name for name in FIELDS if name not in arrays]
    if missing:
        raise errors.CorruptCheckpointError(f"{path} lacks {missing}")
    rows, width = expected["features_shape"][0], expected["num_features"]
    for name in ("weights", "momentum"):
        value = arrays[name]
        if value.dtype != np.float32 or value.shape != (width,):
            raise errors.CorruptCheckpointError(f"{path}: {name} must be float32 ({width},)")
        if not np.all(np.isfinite(value)):
            raise errors.CorruptCheckpointError(f"{path}: {name} is not finite")
    key = arrays["key"]
    if key.dtype != np.uint32 or key.shape != (2,):
        raise errors.CorruptCheckpointError(f"{path}: key must be uint32 (2,)")
    order = arrays["order"]
    if order.dtype.kind not in "iu" or order.shape != (rows,) or not np.array_equal(np.sort(order), np.arange(rows)):
        raise errors.CorruptCheckpointError(f"{path}: order is not a permutation of 0..{rows - 1}")
    cursor, step = _integer(arrays, "cursor", path), _integer(arrays, "step", path)
    if not 0 <= cursor <= rows:
        raise errors.CorruptCheckpointError(f"{path}: cursor {cursor} outside [0, {rows}]")
    if step < 0:
        raise errors.CorruptCheckpointError(f"{path}: step {step} is negative")
    return cursor, step


def restore(path, expected_contract: dict, mesh: Mesh) -> dict:
    """Return the saved state after checking contract, then fields; weights re-replicated on `mesh`."""
    path = os.fspath(path)
    arrays = _load(path)
    _check_contract(arrays, expected_contract, path)
    cursor, step = _check_fields(arrays, expected_contract, path)
    if mesh.size != expected_contract["num_devices"]:
        raise errors.ContractMismatchError(f"the contract pins {expected_contract['num_devices']} devices, mesh has {mesh.size}")
    return {
        "weights": _replicate(arrays["weights"], mesh),
        "momentum": _replicate(arrays["momentum"], mesh),
        "key": np.array(arrays["key"], np.uint32),
        "order": np.array(arrays["order"], np.int32),
        "cursor": cursor,
        "step": step,
    }
