"""The complete transition state: its six fields, their dtypes and shapes, their host form and digest.

This is the one place the state's layout is written down. A saved or shipped state is
a dict of NumPy arrays (`to_arrays`); a live one holds device arrays for weights and
momentum and plain ints for cursor and step (`host_copy` turns it into NumPy).
"""

import hashlib

import numpy as np

from shardlab.core.errors import CorruptCheckpointError

FIELDS = ("weights", "momentum", "key", "order", "cursor", "step")
DEVICE = ("weights", "momentum")  # replicated jax.Arrays on the mesh
SAMPLER = ("key", "order", "cursor", "step")  # host fields: compared exactly, never with a tolerance
SCALARS = ("cursor", "step")  # plain ints in a live state, 0-d int64 when saved

DTYPES = {
    "weights": np.dtype(np.float32),
    "momentum": np.dtype(np.float32),
    "key": np.dtype(np.uint32),  # legacy PRNG key, shape (2,)
    "order": np.dtype(np.int32),
    "cursor": np.dtype(np.int64),
    "step": np.dtype(np.int64),
}


def shapes(width: int, rows: int) -> dict:
    """Field -> shape for a model of `width` features trained on `rows` examples."""
    return {"weights": (width,), "momentum": (width,), "key": (2,), "order": (rows,), "cursor": (), "step": ()}


def to_arrays(state: dict) -> dict:
    """Every field as a NumPy array of its schema dtype (what a checkpoint stores)."""
    missing = [name for name in FIELDS if name not in state]
    if missing:
        raise CorruptCheckpointError(f"state lacks field(s) {missing}; a complete state has all of {list(FIELDS)}")
    arrays = {}
    for name in FIELDS:
        value = int(state[name]) if name in SCALARS else state[name]
        arrays[name] = np.asarray(value, DTYPES[name])
    return arrays


def host_copy(state: dict) -> dict:
    """NumPy copy of every field, cursor and step as ints (for comparisons, records and messages)."""
    arrays = to_arrays(state)
    return {name: int(arrays[name]) if name in SCALARS else arrays[name] for name in FIELDS}


def digests(state: dict) -> dict:
    """Field -> {shape, dtype, sha256} of the schema form of each field."""
    found = {}
    for name, arr in to_arrays(state).items():
        arr = np.ascontiguousarray(arr)
        found[name] = {
            "shape": list(arr.shape),
            "dtype": arr.dtype.str,
            "sha256": hashlib.sha256(arr.tobytes()).hexdigest(),
        }
    return found


def _describe(dtype: np.dtype, shape) -> str:
    """'float32(8,)', with the byte order spelled out when it is not the native one ('>f4(8,)')."""
    dtype = np.dtype(dtype)
    native = dtype.byteorder in ("=", "|") or dtype == dtype.newbyteorder("=")
    return f"{dtype.name if native else dtype.str}{tuple(shape)}"


def check(arrays: dict, width: int, rows: int, where: str) -> None:
    """Raise CorruptCheckpointError unless every field has its shape, dtype and range (finite, a permutation, ...)."""
    for name, shape in shapes(width, rows).items():
        arr, dtype = arrays[name], DTYPES[name]
        if arr.shape != shape or arr.dtype != dtype or arr.dtype.str != dtype.str:
            raise CorruptCheckpointError(
                f"{where}: {name} should be {_describe(dtype, shape)}, found {_describe(arr.dtype, arr.shape)}"
            )
    for name in DEVICE:
        if not np.all(np.isfinite(arrays[name])):
            raise CorruptCheckpointError(f"{where}: {name} hold non-finite values; refusing a diverged state")
    if not np.array_equal(np.sort(arrays["order"]), np.arange(rows)):
        raise CorruptCheckpointError(
            f"{where}: order is not a permutation of 0..{rows - 1} (duplicate or out-of-range ids)"
        )
    if not 0 <= int(arrays["cursor"]) <= rows:
        raise CorruptCheckpointError(f"{where}: cursor {int(arrays['cursor'])} is outside [0, {rows}]")
    if int(arrays["step"]) < 0:
        raise CorruptCheckpointError(f"{where}: step {int(arrays['step'])} is negative")
