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


def _exact(name: str, value) -> np.ndarray:
    """`value` as its schema dtype, refusing a conversion that changes it (3.7 -> 3, True -> 1, -1 -> 2**32-1)."""
    try:
        found = np.asarray(value)
    except Exception as exc:  # a typed PRNG key, a ragged list, ...
        raise CorruptCheckpointError(f"{name} is not an array of numbers ({type(exc).__name__}: {exc})") from None
    dtype = DTYPES[name]
    kinds = "f" if dtype.kind == "f" else "iu"  # weights may be cast to float32; integers must stay integers
    if found.dtype.kind not in kinds:
        raise CorruptCheckpointError(f"{name} must hold {dtype.name} values, found {found.dtype.name} {value!r:.80}")
    info = np.iinfo(dtype) if dtype.kind != "f" else None
    if info and found.size and (int(found.min()) < info.min or int(found.max()) > info.max):
        raise CorruptCheckpointError(
            f"{name} holds values outside the {dtype.name} range [{info.min}, {info.max}] (min {int(found.min())}, "
            f"max {int(found.max())}); saving it would silently change them"
        )
    return np.asarray(found, dtype)


def to_arrays(state: dict) -> dict:
    """Every field as a NumPy array of its schema dtype (what a checkpoint stores); no value is changed silently."""
    missing = [name for name in FIELDS if not isinstance(state, dict) or name not in state]
    if missing:
        raise CorruptCheckpointError(f"state lacks field(s) {missing}; a complete state has all of {list(FIELDS)}")
    return {name: _exact(name, state[name]) for name in FIELDS}


def host_copy(state: dict) -> dict:
    """NumPy copy of every field, cursor and step as ints (for comparisons, records and messages)."""
    arrays = to_arrays(state)
    return {name: int(arrays[name]) if name in SCALARS else arrays[name] for name in FIELDS}


def digests(state: dict) -> dict:
    """Field -> {shape, dtype, sha256} of the schema form of each field."""
    found = {}
    for name, arr in to_arrays(state).items():
        arr = np.asarray(arr)  # a scalar keeps its shape () (np.ascontiguousarray would make it (1,))
        found[name] = {
            "shape": list(arr.shape),
            "dtype": arr.dtype.str,
            "sha256": hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest(),
        }
    return found


def _describe(dtype: np.dtype, shape) -> str:
    """'float32(8,)', with the byte order spelled out when it is not the native one ('>f4(8,)')."""
    dtype = np.dtype(dtype)
    native = dtype.byteorder in ("=", "|") or dtype.str == dtype.newbyteorder("=").str
    order = "" if native else (" big-endian" if dtype.byteorder == ">" else " little-endian")
    return f"{dtype.name}{order} ({dtype.str}){tuple(shape)}" if order else f"{dtype.name}{tuple(shape)}"


def check_layout(name: str, dtype, shape, width: int, rows: int, where: str) -> None:
    """Raise CorruptCheckpointError unless field `name` has the schema's dtype (byte order included) and shape."""
    expected, want = DTYPES[name], shapes(width, rows)[name]
    if tuple(shape) != want or np.dtype(dtype) != expected or np.dtype(dtype).str != expected.str:
        raise CorruptCheckpointError(
            f"{where}: {name} should be {_describe(expected, want)}, found {_describe(dtype, shape)}"
        )


def check(arrays: dict, width: int, rows: int, where: str) -> None:
    """Raise CorruptCheckpointError unless every field has its shape, dtype and range (finite, a permutation, ...)."""
    for name in FIELDS:
        check_layout(name, arrays[name].dtype, arrays[name].shape, width, rows, where)
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
