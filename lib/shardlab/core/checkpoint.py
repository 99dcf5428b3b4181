"""Contract-checked NPZ checkpoints, published atomically and never overwritten.

`save` writes a temporary file in the target folder, flushes and fsyncs it, then
hard-links it to the final name (which fails if that name exists, even when two
savers race) and removes the temporary name. A reader therefore sees either no
file or a complete one. This shows local restart, not power-loss durability.

`restore` is a continuation, never a migration: any contract difference (data,
seed, batch size, optimiser constants, device count) is refused. Loosening that
for, say, a new batch size would need a separate, deliberate migration contract
that promises, in writing and in a test:

- both contracts, old and new, recorded in the new checkpoint with a new schema
  version and the hash of the parent checkpoint, so no receipt can claim an
  uninterrupted replay across the change;
- how the unread rest of the current `order` is regrouped (the cursor stays a
  position in the same permutation; only the grouping of the remaining ids
  changes) and what `step` means afterwards (updates of different sizes);
- what happens to `momentum`, which summarises gradients of the old grouping
  (kept, rescaled or reset) and to any learning-rate schedule keyed on `step`;
- a control: the migrated run equals an uninterrupted run that made the same
  change at the same step, compared field by field like every other resume.
"""

import hashlib
import io
import json
import os
import tempfile
import zipfile

import numpy as np
from jax.sharding import Mesh

from shardlab.core.config import Config
from shardlab.core.errors import (
    CheckpointExistsError,
    ContractMismatchError,
    CorruptCheckpointError,
)
from shardlab.core.fixtures import check_dataset
from shardlab.core.schema import DEVICE, FIELDS, check, host_copy, to_arrays
from shardlab.core.state import replicate

SCHEMA_VERSION = 1
MEMBERS = frozenset(FIELDS) | {"contract", "integrity"}  # integrity: sha256 tying the members of one save together
MAX_MEMBER_BYTES = 1 << 30  # refuse declared arrays larger than 1 GiB before reading them


def data_hash(data) -> str:
    """sha256 over the dataset's shapes, dtypes and bytes."""
    data = check_dataset(data)
    digest = hashlib.sha256()
    for arr in data:
        digest.update(f"{arr.dtype.str}{arr.shape}".encode())
        digest.update(np.ascontiguousarray(arr).tobytes())
    return digest.hexdigest()


def contract(data, config: Config) -> dict:
    """Everything that must match for a checkpoint to continue *this* experiment."""
    data = check_dataset(data)
    return {
        "schema_version": SCHEMA_VERSION,
        "features_shape": list(data.features.shape),
        "features_dtype": data.features.dtype.str,
        "targets_shape": list(data.targets.shape),
        "targets_dtype": data.targets.dtype.str,
        "data_sha256": data_hash(data),
        "seed": int(config.seed),
        "batch_size": int(config.batch_size),
        "num_features": int(data.features.shape[1]),
        "learning_rate": float(config.learning_rate),
        "decay": float(config.decay),
        "num_devices": int(config.num_devices),
    }


def _arrays(state: dict, contract_: dict) -> dict:
    """The members of one checkpoint: the six fields, the contract and the integrity hash over both."""
    arrays = {**to_arrays(state), "contract": np.asarray(json.dumps(contract_, sort_keys=True))}
    return {**arrays, "integrity": np.asarray(integrity(arrays))}


def integrity(arrays: dict) -> str:
    """sha256 over each field's and the contract's name, dtype, shape and bytes, as saved."""
    digest = hashlib.sha256()
    for name in (*FIELDS, "contract"):
        arr = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{arr.dtype.str}:{arr.shape}:".encode())
        digest.update(arr.tobytes())
    return digest.hexdigest()


def _phase(name: str) -> None:
    """Fault-injection point: a no-op, replaced in crash drills to stop a saver at `name`."""


def save(path, state: dict, contract_: dict) -> str:
    """Write all six fields plus the contract to a new NPZ at `path`; return the path.

    Raises CheckpointExistsError (and writes nothing) if `path` already exists.
    """
    path = os.fspath(path)
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} already exists; checkpoints are never overwritten, use a new path")
    arrays = _arrays(state, contract_)
    _check_fields(arrays, contract_, f"refusing to save {path}")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    _phase("before_temp")
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            _phase("temp_created")
            np.savez(handle, **arrays)
            handle.flush()
            _phase("written")
            os.fsync(handle.fileno())
        _phase("fsynced")
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise CheckpointExistsError(
                f"{path} appeared while saving (another saver won); nothing was overwritten, use a new path"
            ) from None
    finally:
        _phase("linked_or_failed")
        os.unlink(tmp)
    _phase("temp_removed")
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def _check_headers(raw: bytes, path: str) -> None:
    """Refuse unexpected members, object dtypes and huge declared shapes before loading."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
    except Exception as exc:  # BadZipFile, but also NotImplementedError etc. for damaged headers
        raise CorruptCheckpointError(
            f"{path} is not an NPZ (zip) file, or it is truncated ({type(exc).__name__}: {exc})"
        ) from None
    names = {}
    for info in archive.infolist():
        if not info.filename.endswith(".npy") or "/" in info.filename or "\\" in info.filename:
            raise CorruptCheckpointError(f"{path} holds an unexpected member {info.filename!r}")
        if info.filename[:-4] in names:
            raise CorruptCheckpointError(f"{path} holds member {info.filename!r} twice; which one was saved is unknown")
        names[info.filename[:-4]] = info
    missing = sorted(MEMBERS - names.keys())
    extra = sorted(names.keys() - MEMBERS)
    if missing:
        hint = " (momentum is part of the optimiser state; it cannot be rebuilt)" if "momentum" in missing else ""
        raise CorruptCheckpointError(f"{path} lacks array(s) {missing}{hint}")
    if extra:
        raise CorruptCheckpointError(f"{path} holds unexpected array(s) {extra}")
    for name, info in names.items():
        try:
            with archive.open(info) as member:
                version = np.lib.format.read_magic(member)
                read_header = {
                    (1, 0): np.lib.format.read_array_header_1_0,
                    (2, 0): np.lib.format.read_array_header_2_0,
                }[version]
                shape, _, dtype = read_header(member)
        except Exception as exc:  # any malformed header is a refusal, never a crash
            raise CorruptCheckpointError(f"{path}: member {name!r} has no valid .npy header ({exc})") from None
        if dtype.hasobject:
            raise CorruptCheckpointError(f"{path}: member {name!r} holds Python objects; refusing to unpickle")
        if int(np.prod(shape, dtype=np.float64)) * dtype.itemsize > MAX_MEMBER_BYTES:
            raise CorruptCheckpointError(f"{path}: member {name!r} declares shape {shape}, far too large")


def _read(path: str) -> dict:
    if os.path.islink(path):
        raise CorruptCheckpointError(f"{path} is a symbolic link; restore reads only regular files")
    if not os.path.isfile(path):
        raise CorruptCheckpointError(f"{path} does not exist or is not a regular file")
    with open(path, "rb") as handle:
        raw = handle.read()
    _check_headers(raw, path)
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            return {name: npz[name] for name in MEMBERS}
    except Exception as exc:
        raise CorruptCheckpointError(
            f"{path} could not be read as a checkpoint ({type(exc).__name__}: {exc})"
        ) from None


def check_contract(found: dict, expected: dict) -> None:
    """Raise ContractMismatchError naming every field that differs."""
    keys = sorted(set(found) | set(expected))
    diffs = [
        f"{k}: checkpoint has {found.get(k)!r}, this run has {expected.get(k)!r}"
        for k in keys
        if found.get(k) != expected.get(k)
    ]
    if diffs:
        raise ContractMismatchError(
            "the checkpoint belongs to a different experiment, so restoring it would not continue "
            "this one (a changed batch size or seed is a new experiment, not a continuation):\n  "
            + "\n  ".join(diffs)
            + "\nRestore with the checkpoint's own data and settings, or start the new experiment from step 0 "
            "(shardlab/checkpoint.py says what a deliberate migration would have to promise)."
        )


def _check_fields(arrays: dict, expected: dict, path: str) -> None:
    """Raise CorruptCheckpointError unless every field has the contract's shape, dtype and range."""
    check(arrays, expected["num_features"], expected["features_shape"][0], path)


def restore(path, expected_contract: dict, mesh: Mesh) -> dict:
    """Return the saved state after checking contract, then fields; weights re-replicated on `mesh`."""
    path = os.fspath(path)
    arrays = _read(path)
    try:
        found = json.loads(str(arrays["contract"][()]))
    except (ValueError, TypeError, IndexError):
        raise CorruptCheckpointError(f"{path}: the contract is not valid JSON") from None
    if not isinstance(found, dict):
        raise CorruptCheckpointError(f"{path}: the contract is not a JSON object")
    check_contract(found, expected_contract)
    _check_fields(arrays, expected_contract, path)
    if str(arrays["integrity"][()]) != integrity(arrays):
        raise CorruptCheckpointError(
            f"{path}: the arrays do not match the integrity checksum saved with them, so the file was altered "
            "after saving or mixes members of two checkpoints; restore another checkpoint"
        )
    if mesh.size != expected_contract["num_devices"]:
        raise ContractMismatchError(
            f"{path}: the contract pins {expected_contract['num_devices']} device(s) but the mesh has {mesh.size}; "
            f"restart the kernel and call setup_devices({expected_contract['num_devices']}) before restoring"
        )
    state = host_copy(arrays)
    return {**state, **{name: replicate(state[name], mesh) for name in DEVICE}}
