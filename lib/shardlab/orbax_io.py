"""The same six-field state through Orbax: saved as a pytree, restored onto a mesh-carrying target.

A saved folder holds the Orbax checkpoint (`state/`) and `shardlab.json` (the contract, the
state's width and row count, each field's checksum), published together by one rename. Restore
checks the contract before Orbax reads anything, like the NPZ path, then the fields and checksums.

The contract is whichever one the implementation under study builds: any JSON mapping, kept as
given and compared for equality in its JSON form, never checked against the reference's keys.
So the sampler fields are not replayed from a seed here (the reference's own NPZ restore does
that with its own contract); the checksums and the field checks guard the Orbax copy.
"""

import json
import logging
import os
import shutil
import threading
import time

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from shardlab.core import checkpoint, files
from shardlab.core.batch import REPLICATED, is_replicated
from shardlab.core.schema import DEVICE, DTYPES, FIELDS, SCALARS, check, digests, host_copy, shapes, to_arrays
from shardlab.errors import (
    BoundedReadError,
    CheckpointExistsError,
    CheckpointWriteError,
    CorruptCheckpointError,
    UsageError,
)

STATE = "state"  # the Orbax checkpoint inside a saved folder
CONTRACT = "shardlab.json"  # beside it: the contract and the field checksums
MAX_CONTRACT_BYTES = 1 << 16
MAX_ELEMENTS = 1 << 24  # bound on the width and row count a contract file may declare (the restore target's size)
JOIN_SECONDS = 10  # bound on waiting for the writer threads of a failed save


def as_tree(state: dict) -> dict:
    """The state as an Orbax pytree: device arrays as they are, host fields as NumPy arrays."""
    return {**to_arrays(state), **{name: state[name] for name in DEVICE}}


def _check_target(onto, like: dict, path) -> None:
    """UsageError unless `onto`, a caller's restore target, has exactly the fields of `like`, shapes and dtypes."""
    if not isinstance(onto, dict) or set(onto) != set(like):
        found = sorted(onto) if isinstance(onto, dict) else type(onto).__name__
        raise UsageError(f"{path}: the restore target has fields {found}, the checkpoint {sorted(like)}")
    for name, value in like.items():
        leaf = onto[name]
        if tuple(np.shape(leaf)) != value.shape or np.dtype(leaf.dtype) != value.dtype:
            raise UsageError(
                f"{path}: the restore target's {name} is {np.dtype(leaf.dtype)}{tuple(np.shape(leaf))}, "
                f"the checkpoint holds {value.dtype}{value.shape}"
            )


def target(like: dict, mesh: Mesh) -> dict:
    """Restore target: ShapeDtypeStructs carrying NamedSharding(mesh, P()) for device fields."""
    replicated = NamedSharding(mesh, REPLICATED)
    tree = as_tree(like)
    return {
        name: jax.ShapeDtypeStruct(np.shape(value), np.asarray(value).dtype, sharding=replicated)
        if name in DEVICE
        else np.zeros_like(value)
        for name, value in tree.items()
    }


def remove_stale(folder) -> list[str]:
    """Remove staging folders (`.tmp-<pid>-*.orbax`) of savers that were killed; return their names."""
    return files.remove_stale(folder, ".orbax", folders=True)


def _join(before: set, seconds: float) -> None:
    """Wait (at most `seconds` in all) for threads started since `before` to finish."""
    deadline = time.monotonic() + seconds
    for thread in set(threading.enumerate()) - before:
        try:
            thread.join(max(0.0, deadline - time.monotonic()))
        except Exception:  # Orbax's signalling threads re-raise their own failure on join
            pass


def as_json(contract_, where: str) -> dict:
    """`contract_` as it reads back from JSON (tuples become lists); CorruptCheckpointError if it is not JSON data.

    Any mapping with string keys whose values JSON can hold is a contract here: the course asks for
    plain JSON data, not for the reference's key names.
    """
    if not isinstance(contract_, dict) or not all(isinstance(key, str) for key in contract_):
        raise CorruptCheckpointError(f"{where}: the contract is {type(contract_).__name__}, not a dict with str keys")
    try:
        text = json.dumps(contract_, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise CorruptCheckpointError(
            f"{where}: the contract is not plain JSON data ({type(exc).__name__}: {str(exc)[:200]}); "
            "use str, int, float, bool, None, lists and dicts (int(...) / float(...) for NumPy numbers)"
        ) from None
    if len(text) > MAX_CONTRACT_BYTES // 2:
        raise CorruptCheckpointError(f"{where}: the contract has {len(text)} characters of JSON, more than we keep")
    return json.loads(text)


def _layout(host: dict) -> dict:
    """The width and row count a state's weights and order imply (`check` then verifies every field with them)."""
    return {"num_features": int(np.size(host["weights"])), "rows": int(np.size(host["order"]))}


def save(path, state: dict, contract_: dict) -> str:
    """Save `state` with Orbax into a new folder `path`, its contract beside it in `path`/shardlab.json.

    Orbax writes inside a staging folder next to `path`; the contract and the field
    checksums are added, and the staging folder is renamed to `path` only once complete.
    A failing save raises CheckpointWriteError within the call and leaves no temporary.
    """
    import orbax.checkpoint as ocp

    path = os.path.abspath(os.fspath(path))
    where = f"refusing to save {path}"
    contract_ = as_json(contract_, where)
    host = host_copy(state)
    layout = _layout(host)
    check(to_arrays(host), layout["num_features"], layout["rows"], where)
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} already exists; Orbax checkpoints are never overwritten either")
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
        remove_stale(parent)
        staging = files.temporary_dir(parent, ".orbax")
    except OSError as exc:
        raise CheckpointWriteError(f"cannot write an Orbax checkpoint into {parent} ({exc.strerror or exc})") from None
    threads = set(threading.enumerate())
    try:
        # synchronous (no barrier at exit); without OCDBT each field is a zarr folder under its own name, so the
        # same files (and bytes) appear every run, where OCDBT writes its data under random names
        absl = logging.getLogger("absl")  # Orbax's thread-timing-dependent notes ("Skipping merge of OCDBT ...")
        level = absl.level  # would make every receipt differ; errors still show
        absl.setLevel(logging.ERROR)
        try:
            with ocp.Checkpointer(ocp.StandardCheckpointHandler(use_ocdbt=False)) as checkpointer:
                checkpointer.save(os.path.join(staging, STATE), args=ocp.args.StandardSave(as_tree(state)))
        finally:
            absl.setLevel(level)
        with open(os.path.join(staging, CONTRACT), "x", encoding="utf-8") as handle:
            beside = {"contract": contract_, "layout": layout, "state": digests(host)}
            json.dump(beside, handle, indent=1, sort_keys=True)
        files.sync(os.path.join(staging, CONTRACT))  # on disk before the folder is published by its rename
        os.chmod(staging, 0o755)
        if os.path.lexists(path):
            raise CheckpointExistsError(f"{path} appeared while saving; nothing was overwritten, use a new path")
        os.rename(staging, path)
    except CheckpointExistsError:
        raise
    except Exception as exc:  # Orbax and TensorStore raise ValueError, OSError, ...; all are a failed save
        _join(threads, JOIN_SECONDS)  # Orbax's writer threads may still be writing into staging
        raise CheckpointWriteError(
            f"the Orbax save to {path} failed ({type(exc).__name__}: {str(exc)[:300]}); nothing was published"
        ) from None
    finally:
        _remove(staging)
    return path


def _remove(staging: str, seconds: float = 5.0) -> None:
    """Remove `staging`, again while TensorStore's writers of a failed save still recreate files (bounded)."""
    if not os.path.lexists(staging):  # published: renamed to the checkpoint's path
        return
    deadline, quiet = time.monotonic() + seconds, 0
    while quiet < 3 and time.monotonic() < deadline:
        shutil.rmtree(staging, ignore_errors=True)
        quiet = quiet + 1 if not os.path.lexists(staging) else 0
        if quiet < 3:
            time.sleep(0.1)


def _contract_file(path: str) -> dict:
    """The JSON beside the Orbax state, read without following links or blocking; refused if malformed."""
    file = os.path.join(path, CONTRACT)
    try:
        raw = files.read_bounded(file, MAX_CONTRACT_BYTES)
    except OSError as exc:
        raise CorruptCheckpointError(
            f"{file} cannot be read ({exc.strerror}); an Orbax checkpoint without its contract is not restored"
        ) from None
    except BoundedReadError as exc:
        said = "is not a regular file; nothing was restored"
        if exc.size is not None:
            said = f"is not a shardlab contract file (ValueError: more than {MAX_CONTRACT_BYTES} bytes)"
        raise CorruptCheckpointError(f"{file} {said}") from None
    try:
        found = json.loads(raw.decode("utf-8"))
        if not isinstance(found, dict) or not isinstance(found.get("contract"), dict):
            raise ValueError("no contract mapping")
        if not isinstance(found.get("state"), dict) or sorted(found["state"]) != sorted(FIELDS):
            raise ValueError(f"no checksum for each of {list(FIELDS)}")
        layout = found.get("layout")
        sizes = [layout.get(k) for k in ("num_features", "rows")] if isinstance(layout, dict) else [None]
        if not all(type(n) is int and 1 <= n <= MAX_ELEMENTS for n in sizes):
            raise ValueError(f"layout {layout!r:.80} is not a width and row count in [1, {MAX_ELEMENTS}]")
    except (ValueError, RecursionError, AttributeError) as exc:
        raise CorruptCheckpointError(f"{file} is not a shardlab contract file ({type(exc).__name__}: {exc})") from None
    return found


def restore(path, expected_contract: dict, mesh: Mesh, onto: dict | None = None) -> dict:
    """Restore the Orbax checkpoint `path` onto `mesh`: contract first (equal as JSON), then fields and checksums.

    The target handed to Orbax is `target(...)` for the file's shapes, or `onto` when a caller passes one (so a
    notebook can show the very target the restore uses); `onto` must have the file's fields, shapes and dtypes,
    else UsageError says which leaf differs.
    """
    import orbax.checkpoint as ocp

    path = os.path.abspath(os.fspath(path))
    expected_contract = as_json(expected_contract, f"cannot restore {path}")
    if os.path.islink(path) or not os.path.isdir(path):
        raise CorruptCheckpointError(f"{path} is not a folder; an Orbax checkpoint is a folder `save` wrote")
    saved = _contract_file(path)
    checkpoint.check_contract(saved["contract"], expected_contract)
    width, rows = saved["layout"]["num_features"], saved["layout"]["rows"]
    like = {name: np.zeros(shape, DTYPES[name]) for name, shape in shapes(width, rows).items()}
    onto = target(like, mesh) if onto is None else onto
    _check_target(onto, like, path)
    try:
        with ocp.Checkpointer(ocp.StandardCheckpointHandler()) as checkpointer:
            tree = checkpointer.restore(os.path.join(path, STATE), args=ocp.args.StandardRestore(onto))
        arrays = to_arrays({name: np.asarray(tree[name]) for name in FIELDS})
    except Exception as exc:  # damaged metadata: JSONDecodeError, UnicodeDecodeError, ValueError, ...
        raise CorruptCheckpointError(
            f"{path}: Orbax could not restore the state ({type(exc).__name__}: {str(exc)[:300]})"
        ) from None
    check(arrays, width, rows, path)
    if digests(arrays) != saved["state"]:
        raise CorruptCheckpointError(f"{path}: the restored fields differ from the checksums saved beside them")
    return {
        **{name: tree[name] for name in DEVICE},
        **{name: int(arrays[name]) for name in SCALARS},
        "key": arrays["key"],
        "order": arrays["order"],
    }


def leaf_report(a: dict, b: dict, mesh: Mesh) -> dict:
    """Per field: max absolute difference, equal dtype and shape; replicated on `mesh` for device fields.

    Both states are compared in the schema's form (`to_arrays`: an int64 order becomes int32 only if
    every value fits), so an implementation may keep its fields in any dtype that holds them exactly.
    """
    a, b = to_arrays(a), {**to_arrays(b), **{name: b[name] for name in DEVICE}}
    report = {}
    for name in FIELDS:
        x, y = np.asarray(a[name]), np.asarray(b[name])
        same_shape = x.shape == y.shape and x.dtype == y.dtype
        diff = float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if same_shape and x.size else 0.0
        entry = {"max_abs_diff": diff if same_shape else float("inf"), "same_shape_dtype": bool(same_shape)}
        if name in DEVICE:
            entry["replicated_on_mesh"] = is_replicated(b[name], mesh)
        report[name] = entry
    return report
