"""Contract-checked NPZ checkpoints, published atomically and never overwritten.

`save` writes a temporary file in the target folder, flushes and fsyncs it, then
hard-links it to the final name (which fails if that name exists, even when two
savers race) and removes the temporary name. A reader therefore sees either no
file or a complete one. This shows local restart, not power-loss durability.
The file mechanics are `shardlab.core.files` (`temporary`, `publish_new`).

`restore` checks the contract first, then every field, the integrity hash over the members
and the sampler state the step implies. Before any of that, `shardlab.core.archive` reads the
file without trusting it (sizes, zip structure, `.npy` headers; an object array is refused,
as `np.load(path, allow_pickle=False)` refuses it).

`restore` is a continuation, never a migration: any contract difference (data, seed,
batch size, optimiser constants, device count) is refused. A deliberate migration contract would
have to promise: both contracts and the parent checkpoint's hash under a new schema version; how
the unread rest of `order` is regrouped and what `step` means afterwards; what happens to
momentum; and a control run that made the same change at the same step, compared field by field.
"""

import hashlib
import json
import os

import numpy as np
from jax.sharding import Mesh

from shardlab.core import archive, files
from shardlab.core.config import Config
from shardlab.core.errors import (
    CheckpointExistsError,
    CheckpointWriteError,
    ContractMismatchError,
    CorruptCheckpointError,
    DataError,
)
from shardlab.core.fixtures import check_dataset
from shardlab.core.sampler import sampler_at
from shardlab.core.schema import DEVICE, FIELDS, check, host_copy, to_arrays
from shardlab.core.state import replicate

SCHEMA_VERSION = 1
_KINDS = {int: "schema_version seed batch_size num_features num_devices", float: "learning_rate decay"}
_KINDS.update({str: "features_dtype targets_dtype data_sha256", list: "features_shape targets_shape"})
CONTRACT_TYPES = {key: kind for kind, keys in _KINDS.items() for key in keys.split()}  # bool is no int here


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


def check_contract_form(contract_, where: str) -> None:
    """Raise CorruptCheckpointError unless `contract_` has every key of `contract()` with a value of its type."""
    if not isinstance(contract_, dict):
        raise CorruptCheckpointError(f"{where}: the contract is {type(contract_).__name__}, not a dict from contract()")
    missing = sorted(CONTRACT_TYPES.keys() - contract_.keys())
    wrong = [k for k, t in CONTRACT_TYPES.items() if k in contract_ and type(contract_[k]) is not t]
    shapes_ok = all(
        isinstance(contract_.get(k), list)
        and len(contract_[k]) == n
        and all(type(d) is int and d >= 1 for d in contract_[k])
        for k, n in (("features_shape", 2), ("targets_shape", 1))
    )
    if missing or wrong or not shapes_ok or contract_["num_features"] != contract_["features_shape"][1]:
        raise CorruptCheckpointError(
            f"{where}: the contract is malformed (missing {missing}, wrong type {wrong}, shapes valid: {shapes_ok}); "
            "build it with contract(data, config)"
        )


def members(state: dict, contract_: dict) -> dict:
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


def remove_stale(folder) -> list[str]:
    """Remove the temporaries of killed savers (`.tmp-<pid>-*.npz`, pid gone); return their names.

    Only temporary names are unlinked: a temporary that is a second hard link to a
    published checkpoint loses that name, the checkpoint keeps its own.
    """
    return files.remove_stale(folder, ".npz")


def save(path, state: dict, contract_: dict) -> str:
    """Write all six fields plus the contract to a new NPZ at `path`; return the path.

    Raises CheckpointExistsError (and writes nothing) if `path` already exists, and
    CorruptCheckpointError for a state or contract it would have to change to save.
    Temporaries left by killed savers in the folder are removed first (`remove_stale`).
    A save that raises leaves the folders as they were: those it made for `path` are removed.
    """
    path = os.fspath(path)
    check_contract_form(contract_, f"refusing to save {path}")
    arrays = members(state, contract_)
    _check_fields(arrays, contract_, f"refusing to save {path}")
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} already exists; checkpoints are never overwritten, use a new path")
    folder, publishing = os.path.dirname(os.path.abspath(path)), False
    try:
        with files.new_folders(folder):  # makes the missing folders; if the save raises, removes those it made
            remove_stale(folder)
            fd, tmp = files.temporary(folder, ".npz")  # beside the target: the link below never crosses file systems
            publishing = True  # fill, flush, fsync, hard-link to `path` (fails if the name exists), fsync the folder
            files.publish_new(fd, tmp, path, lambda handle: np.savez(handle, **arrays))
    except OSError as exc:
        raise _save_error(path, folder, exc, publishing) from None
    return path


def _save_error(path: str, folder: str, exc: OSError, publishing: bool) -> Exception:
    """The course's error for an OSError of `save`: the folder was unusable, another saver won, or the write failed."""
    if not publishing:
        reason = exc.strerror or exc
        return CheckpointWriteError(f"cannot write a checkpoint into {folder} ({reason}); choose a writable folder")
    if isinstance(exc, FileExistsError):
        return CheckpointExistsError(
            f"{path} appeared while saving (another saver won); nothing was overwritten, use a new path"
        )
    return CheckpointWriteError(f"writing {path} failed ({exc.strerror or exc}); nothing was published")


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
            "(help(shardlab.core.checkpoint) says what a deliberate migration would have to promise)."
        )


def _check_fields(arrays: dict, expected: dict, path: str) -> None:
    """Raise CorruptCheckpointError unless every field has the contract's shape, dtype and range."""
    check(arrays, expected["num_features"], expected["features_shape"][0], path)


def check_sampler(arrays: dict, contract_: dict, where: str) -> None:
    """Raise CorruptCheckpointError unless key, order and cursor are what (seed, rows, batch size, step) imply.

    No run reaches another sampler state: a forged or mixed state is refused even with a recomputed checksum.
    """
    step = int(arrays["step"])
    try:
        implied = sampler_at(contract_["seed"], contract_["features_shape"][0], contract_["batch_size"], step)
    except DataError as exc:
        raise CorruptCheckpointError(f"{where}: {exc}; no run of this experiment reached that step") from None
    differ = [name for name in ("key", "order", "cursor") if not np.array_equal(arrays[name], implied[name])]
    if differ:
        raise CorruptCheckpointError(
            f"{where}: {differ} are not what seed {contract_['seed']}, batch size {contract_['batch_size']} and "
            f"step {step} imply (cursor {implied['cursor']}, key {implied['key'].tolist()}); no run reaches this "
            "state, so it was forged or mixed from two checkpoints; restore another checkpoint"
        )


def restore(path, expected_contract: dict, mesh: Mesh) -> dict:
    """Return the saved state after checking contract, fields, checksum and sampler; weights replicated on `mesh`.

    Every member's declared size and header are checked against the shapes the contract
    implies before anything is decompressed.
    """
    path = os.fspath(path)
    check_contract_form(expected_contract, f"cannot restore {path}")

    def compare(saved) -> None:  # before any field is checked against the expected contract's shapes
        try:
            found = json.loads(str(saved[()]))
        except (ValueError, TypeError, IndexError, RecursionError):
            raise CorruptCheckpointError(f"{path}: the contract is not valid JSON") from None
        check_contract_form(found, f"{path}: the saved contract")  # a JSON list, string or {} is refused here
        check_contract(found, expected_contract)

    arrays = archive.read_members(path, expected_contract, compare)  # sizes and headers checked before decompressing
    _check_fields(arrays, expected_contract, path)
    if str(arrays["integrity"][()]) != integrity(arrays):
        raise CorruptCheckpointError(
            f"{path}: the arrays do not match the integrity checksum saved with them, so the file was altered "
            "after saving or mixes members of two checkpoints; restore another checkpoint"
        )
    check_sampler(arrays, expected_contract, path)
    if mesh.size != expected_contract["num_devices"]:
        raise ContractMismatchError(
            f"{path}: the contract pins {expected_contract['num_devices']} device(s) but the mesh has {mesh.size}; "
            f"restart the kernel and call setup_devices({expected_contract['num_devices']}) before restoring"
        )
    state = host_copy(arrays)
    return {**state, **{name: replicate(state[name], mesh) for name in DEVICE}}
