"""The small JSON and NPZ helpers every writer and reader outside the core shares.

- `write_json(path, value)`: JSON replaced atomically (`shardlab.core.files.replace`: a temporary
  beside the target and one `os.replace`, so a reader never sees half a file), with `plain`
  converting NumPy and JAX values;
- `plain(value)`: a JSON-literal copy (arrays and scalars become lists and numbers);
- `read_record(path, limit)`: the JSON object a command left at `path`, read with a bound (`{}` when
  there is none it could have written);
- `without_folder(value, folder)`: a JSON value whose strings name files inside `folder` by their own
  names, never by this machine's path;
- `read_npz(path)`: every member of an `.npz` file as a NumPy array, never unpickling;
- `inside(path, folder)`: whether a path names `folder` or something under it (by absolute name);
  no course function uses it, so the seal (checker/seal.py) leaves it to the checker's own guards;
- `write_zip(path, members)`: a deflated zip whose bytes depend only on its members' names, bytes
  and modes (every timestamp ZIP_TIME), the one zip writer of the portfolio and the autograder bundle.

The file mechanics themselves (temporaries, exclusive publication, bounded reads) have one
home, `shardlab.core.files`, which the checkpoint, the manifests, the output folders and the
Orbax path share.
"""

import json
import os
import zipfile

from shardlab.core import files

# NumPy is imported where an array is met, not here: `check --output` claims its folder through this module
# before it starts the checking interpreter, and a supervisor that imports NumPy starts that interpreter later


def plain(value, digits: int | None = None):
    """A JSON-literal copy of `value`: NumPy and JAX arrays and scalars become lists and numbers, keys strings;
    with `digits`, every float keeps that many significant digits."""
    if isinstance(value, dict):
        return {str(k): plain(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, digits) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        import numpy as np

        return plain(np.asarray(value).tolist(), digits)
    if digits is not None and isinstance(value, float):
        return float(f"{value:.{digits}g}")
    return value


def dumps(value, indent: int | None = 1) -> str:
    """`value` as JSON text (sorted keys, `plain` for arrays, str() for anything else such as a path)."""
    return json.dumps(plain(value), indent=indent, sort_keys=True, default=str)


def write_json(path, value, indent: int | None = 1) -> str:
    """Write `value` to `path` as JSON (see `dumps`), atomically; return the path."""
    return files.replace(path, dumps(value, indent) + "\n")


def read_record(path, limit: int) -> dict:
    """The JSON object at `path`, read through `files.read_bounded`; {} if it is missing, not a regular file (a
    FIFO never blocks), over `limit` bytes, not JSON or not an object: a record a command writes and reads back."""
    try:
        found = json.loads(files.read_bounded(path, limit))
    except (OSError, ValueError, RecursionError):
        return {}
    return found if isinstance(found, dict) else {}


def inside(path, folder) -> bool:
    """Whether `path` is `folder` or lies under it, compared by absolute names (no link resolved: pass real paths
    where links matter); a sibling that merely shares the prefix is not, and a descriptor (an int) is no path."""
    if isinstance(path, int):
        return False
    try:
        path, folder = os.path.abspath(os.fsdecode(path)), os.path.abspath(os.fsdecode(folder))
    except TypeError:
        return False
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def without_folder(value, folder):
    """`value` (JSON) with the prefix `folder/` removed from every string in it: a report that ran in a private
    or temporary folder names its files by their bare names, never by this machine's path."""
    prefix = json.dumps(os.path.join(os.fspath(folder), ""))[1:-1]  # as the prefix stands inside JSON strings
    return json.loads(json.dumps(value).replace(prefix, ""))


def read_npz(path) -> dict:
    """{member: array} of an .npz file, read whole and closed, with pickles refused."""
    import numpy as np

    with np.load(os.fspath(path), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


ZIP_TIME = (2000, 1, 1, 0, 0, 0)  # every zip member's timestamp: the same members give the same bytes


def write_zip(path, members) -> str:
    """Write `members`, (name, bytes, mode) in the order given, to a new deflated zip at `path`; return the path."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data, mode in members:
            member = zipfile.ZipInfo(name, ZIP_TIME)
            member.compress_type, member.external_attr = zipfile.ZIP_DEFLATED, mode << 16
            archive.writestr(member, data)
    return os.fspath(path)
