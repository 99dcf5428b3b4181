"""Contract-checked NPZ checkpoints, published atomically and never overwritten.

`save` writes a temporary file in the target folder, flushes and fsyncs it, then
hard-links it to the final name (which fails if that name exists, even when two
savers race) and removes the temporary name. A reader therefore sees either no
file or a complete one. This shows local restart, not power-loss durability.

`restore` is a continuation, never a migration: any contract difference (data, seed,
batch size, optimiser constants, device count) is refused. A deliberate migration contract would
have to promise: both contracts and the parent checkpoint's hash under a new schema version; how
the unread rest of `order` is regrouped and what `step` means afterwards; what happens to
momentum; and a control run that made the same change at the same step, compared field by field.
"""

import contextlib
import hashlib
import io
import json
import os
import stat
import tempfile
import zipfile

import numpy as np
from jax.sharding import Mesh

from shardlab.core.config import Config
from shardlab.core.errors import (
    CheckpointExistsError,
    CheckpointWriteError,
    ContractMismatchError,
    CorruptCheckpointError,
    DataError,
)
from shardlab.core.files import pid_alive, temp_pid
from shardlab.core.fixtures import check_dataset
from shardlab.core.sampler import sampler_at
from shardlab.core.schema import DEVICE, DTYPES, FIELDS, check, check_layout, host_copy, shapes, to_arrays
from shardlab.core.state import replicate

SCHEMA_VERSION = 1
MEMBERS = frozenset(FIELDS) | {"contract", "integrity"}  # integrity: sha256 tying the members of one save together
MAX_CONTRACT_CHARS = 4096  # a contract is ~400 characters of flat JSON
HEADER_BYTES = 4096  # room for one .npy header (numpy writes 128)
TEMP = ".tmp-"  # + saver pid + "-" + random + ".npz": the temporary names `save` creates and `clean` removes
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


def member_bytes(contract_: dict) -> dict:
    """Member -> the largest .npy size a save under `contract_` writes (header room included)."""
    found = {
        name: HEADER_BYTES + int(np.prod(shape, dtype=np.int64)) * DTYPES[name].itemsize
        for name, shape in shapes(contract_["num_features"], contract_["features_shape"][0]).items()
    }
    return {**found, "contract": HEADER_BYTES + 4 * MAX_CONTRACT_CHARS, "integrity": HEADER_BYTES + 4 * 64}


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


def clean(folder) -> list[str]:
    """Remove the temporaries of killed savers (our `.tmp-<pid>-*.npz` names, pid gone); return their names.

    Only temporary names are unlinked: a temporary that is a second hard link to a
    published checkpoint loses that name, the checkpoint keeps its own.
    """
    removed = []
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        pid = temp_pid(name, TEMP, ".npz")
        if pid is not None and not pid_alive(pid):
            with contextlib.suppress(OSError):  # another cleaner was faster, or the folder is read-only
                os.unlink(os.path.join(folder, name))
                removed.append(name)
    return removed


def save(path, state: dict, contract_: dict) -> str:
    """Write all six fields plus the contract to a new NPZ at `path`; return the path.

    Raises CheckpointExistsError (and writes nothing) if `path` already exists, and
    CorruptCheckpointError for a state or contract it would have to change to save.
    Temporaries left by killed savers in the folder are removed first (`clean`).
    """
    path = os.fspath(path)
    check_contract_form(contract_, f"refusing to save {path}")
    arrays = members(state, contract_)
    _check_fields(arrays, contract_, f"refusing to save {path}")
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} already exists; checkpoints are never overwritten, use a new path")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        clean(folder)
        fd, tmp = tempfile.mkstemp(prefix=f"{TEMP}{os.getpid()}-", suffix=".npz", dir=folder)
    except OSError as exc:
        raise CheckpointWriteError(
            f"cannot write a checkpoint into {folder} ({exc.strerror or exc}); choose a writable folder"
        ) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **arrays)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)
    except FileExistsError:
        raise CheckpointExistsError(
            f"{path} appeared while saving (another saver won); nothing was overwritten, use a new path"
        ) from None
    except OSError as exc:
        raise CheckpointWriteError(f"writing {path} failed ({exc.strerror or exc}); nothing was published") from None
    finally:
        os.unlink(tmp)
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def _raw(path: str, limit: int) -> bytes:
    """The file's bytes, read without following a symlink or blocking on a FIFO, refused beyond `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        kind = "a symbolic link" if os.path.islink(path) else f"unreadable ({exc.strerror})"
        raise CorruptCheckpointError(f"{path} is {kind}; restore reads only regular files") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise CorruptCheckpointError(f"{path} is not a regular file (a folder, FIFO or device); nothing was read")
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > limit:
            raise CorruptCheckpointError(
                f"{path} has {info.st_size} bytes; a checkpoint of this contract has at most {limit}"
            )
        return handle.read(limit + 1)


def _member(archive, info, name: str, bound: int, contract_: dict, path: str) -> np.ndarray:
    """One member, its declared size and .npy header checked against the contract before its data is read."""
    if info.file_size > bound:
        raise CorruptCheckpointError(
            f"{path}: member {name!r} declares {info.file_size} bytes; this contract allows at most {bound}"
        )
    try:
        with archive.open(info) as member:
            version = np.lib.format.read_magic(member)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            shape, fortran, dtype = read_header[version](member, max_header_size=HEADER_BYTES)  # KeyError: refused
            if dtype.hasobject:
                raise CorruptCheckpointError(f"{path}: member {name!r} holds Python objects; refusing to unpickle")
            if name in FIELDS:
                check_layout(name, dtype, shape, contract_["num_features"], contract_["features_shape"][0], path)
            elif dtype.kind != "U" or shape != () or dtype.itemsize > 4 * MAX_CONTRACT_CHARS:
                raise CorruptCheckpointError(
                    f"{path}: member {name!r} should be one short string, found {dtype}{shape}"
                )
            if fortran and len(shape) > 1:
                raise CorruptCheckpointError(f"{path}: member {name!r} is in Fortran order; save never writes that")
            size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            data = member.read(size + 1)
    except CorruptCheckpointError:
        raise
    except Exception as exc:  # a malformed header or a damaged deflate stream is a refusal, never a crash
        raise CorruptCheckpointError(f"{path}: member {name!r} is not a valid .npy array ({exc})") from None
    if len(data) != size:
        raise CorruptCheckpointError(f"{path}: member {name!r} holds {len(data)} data bytes, its header says {size}")
    return np.frombuffer(data, dtype).reshape(shape).copy()


def _read(path: str, contract_: dict) -> dict:
    """Every member, each checked against what `contract_` implies before it is decompressed."""
    bounds = member_bytes(contract_)
    raw = _raw(path, sum(bounds.values()) + 1024 * len(bounds))
    if not raw.startswith(b"PK\x03\x04"):
        start = raw.find(b"PK\x03\x04")
        where = f"; a zip starts {start} bytes in (bytes were prepended)" if start > 0 else ""
        raise CorruptCheckpointError(f"{path} is not an NPZ file: it does not start with a zip header{where}")
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
        infos = archive.infolist()
    except Exception as exc:  # BadZipFile, but also NotImplementedError etc. for damaged headers
        raise CorruptCheckpointError(
            f"{path} is not an NPZ (zip) file, or it is truncated ({type(exc).__name__}: {exc})"
        ) from None
    names = {}
    for info in infos:
        name = info.filename[:-4]
        if not info.filename.endswith(".npy") or "/" in info.filename or "\\" in info.filename:
            raise CorruptCheckpointError(f"{path} holds an unexpected member {info.filename!r}")
        if name in names:
            raise CorruptCheckpointError(f"{path} holds member {info.filename!r} twice; which one was saved is unknown")
        names[name] = info
    missing, extra = sorted(MEMBERS - names.keys()), sorted(names.keys() - MEMBERS)
    if missing:
        hint = " (momentum is part of the optimiser state; it cannot be rebuilt)" if "momentum" in missing else ""
        raise CorruptCheckpointError(f"{path} lacks array(s) {missing}{hint}")
    if extra:
        raise CorruptCheckpointError(f"{path} holds unexpected array(s) {extra}")
    return {name: _member(archive, names[name], name, bounds[name], contract_, path) for name in sorted(MEMBERS)}


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
    arrays = _read(path, expected_contract)
    try:
        found = json.loads(str(arrays["contract"][()]))
    except (ValueError, TypeError, IndexError, RecursionError):
        raise CorruptCheckpointError(f"{path}: the contract is not valid JSON") from None
    check_contract_form(found, f"{path}: the saved contract")  # a JSON list, string or {} is refused here
    check_contract(found, expected_contract)
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
