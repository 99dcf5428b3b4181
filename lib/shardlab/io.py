"""The small file helpers every writer and reader outside the core shares.

- `write_atomic(path, data)`: bytes or text through a temporary beside the target and one
  `os.replace`, so a reader (or a killed writer's rerun) never sees half a file;
- `write_json(path, value)`: the same for JSON, with `plain` converting NumPy and JAX values;
- `plain(value)`: a JSON-literal copy (arrays and scalars become lists and numbers);
- `read_npz(path)`: every member of an `.npz` file as a NumPy array, never unpickling.

They live outside `shardlab.core` so the core stays within its reading budget; the core's
own checkpoint writer keeps its fsync'd publication (stage 3 teaches it).
"""

import json
import os

import numpy as np


def write_atomic(path, data: bytes | str, mode: int | None = None) -> str:
    """Write `data` to `path` through `<path>.tmp-<pid>` and one os.replace; return the path."""
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def plain(value, digits: int | None = None):
    """A JSON-literal copy of `value`: NumPy and JAX arrays and scalars become lists and numbers, keys strings;
    with `digits`, every float keeps that many significant digits."""
    if isinstance(value, dict):
        return {str(k): plain(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, digits) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return plain(np.asarray(value).tolist(), digits)
    if digits is not None and isinstance(value, float):
        return float(f"{value:.{digits}g}")
    return value


def dumps(value, indent: int | None = 1) -> str:
    """`value` as JSON text (sorted keys, `plain` for arrays, str() for anything else such as a path)."""
    return json.dumps(plain(value), indent=indent, sort_keys=True, default=str)


def write_json(path, value, indent: int | None = 1) -> str:
    """Write `value` to `path` as JSON (see `dumps`), atomically; return the path."""
    return write_atomic(path, dumps(value, indent) + "\n")


def read_npz(path) -> dict:
    """{member: array} of an .npz file, read whole and closed, with pickles refused."""
    with np.load(os.fspath(path), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}
