"""Defence in depth for hostile checkpoint files: an NPZ read without trusting a byte of it.

`checkpoint.restore` calls `read_members(path, contract)` before it checks anything the course
teaches (the contract, every field, the integrity hash, the sampler). This layer makes sure that
reading a file cannot itself do harm: the file is read whole only if it is a regular file of at
most the size the contract implies (no symlink followed, no FIFO blocked on); it must be a zip
that starts at byte 0 with exactly the expected members, each once; each member's declared size
and `.npy` header (dtype, shape, order) are checked against the contract before its data is
decompressed, so a zip bomb or an object array is refused unread. A file over that size is refused unread
except for its contract member (bounded), compared first when restore asks for the comparison. Every refusal is a
CorruptCheckpointError naming the file and what was wrong.
"""

import io
import os
import struct
import zipfile

import numpy as np

from shardlab.core import files
from shardlab.core.errors import BoundedReadError, CorruptCheckpointError
from shardlab.core.schema import DTYPES, FIELDS, check_layout, shapes

MEMBERS = frozenset(FIELDS) | {"contract", "integrity"}  # integrity: sha256 tying the members of one save together
MAX_CONTRACT_CHARS = 4096  # a contract is ~400 characters of flat JSON
HEADER_BYTES = 4096  # room for one .npy header (numpy writes 128)


def member_bytes(contract_: dict) -> dict:
    """Member -> the largest .npy size a save under `contract_` writes (header room included)."""
    found = {
        name: HEADER_BYTES + int(np.prod(shape, dtype=np.int64)) * DTYPES[name].itemsize
        for name, shape in shapes(contract_["num_features"], contract_["features_shape"][0]).items()
    }
    return {**found, "contract": HEADER_BYTES + 4 * MAX_CONTRACT_CHARS, "integrity": HEADER_BYTES + 4 * 64}


def _raw(path: str, limit: int) -> bytes:
    """The file's bytes, read without following a symlink or blocking on a FIFO, refused beyond `limit` bytes."""
    try:
        return files.read_bounded(path, limit)
    except BoundedReadError as exc:
        said = f"has {exc.size} bytes; a checkpoint of this contract has at most {limit}"
        if exc.size is None:
            said = "is not a regular file (a folder, FIFO or device); nothing was read"
        raise CorruptCheckpointError(f"{path} {said}") from None
    except OSError as exc:
        kind = "a symbolic link" if os.path.islink(path) else f"unreadable ({exc.strerror})"
        raise CorruptCheckpointError(f"{path} is {kind}; restore reads only regular files") from None


CENTRAL_BYTES = 64 * 1024  # room for the zip's end record and central directory (nine members need ~1 kB)


def _contract_first(path: str, limit: int, bound: int, contract_: dict, compare) -> None:
    """Compare the contract of a file over `limit` bytes before its size is refused (rule:contract-first).

    Reads at most the zip's end record, its central directory and the contract member, each bounded, never
    the fields: a larger experiment's checkpoint raises the comparison's ContractMismatchError; anything else
    (within the limit, no zip, no contract member, equal contracts) returns, and the caller reads or refuses it.
    """
    try:
        handle, found = files.open_regular(path)
    except (OSError, BoundedReadError):
        return
    with handle:
        size = found.st_size
        if size <= limit or size < 22:
            return
        handle.seek(max(0, size - CENTRAL_BYTES))
        tail = handle.read(CENTRAL_BYTES)
        end = tail.rfind(b"PK\x05\x06")
        if end < 0 or len(tail) - end < 22:
            return
        central_size, central_start = struct.unpack("<II", tail[end + 12 : end + 20])
        if central_size > CENTRAL_BYTES or central_start + central_size > size:
            return
        try:
            archive = zipfile.ZipFile(handle)
            saved = _member(archive, archive.getinfo("contract.npy"), "contract", bound, contract_, path)
        except (zipfile.BadZipFile, KeyError, CorruptCheckpointError, OSError, ValueError, NotImplementedError):
            return
        compare(saved)


def _member(archive, info, name: str, bound: int, contract_: dict, path: str) -> np.ndarray:
    """One member, its declared size and .npy header checked against the contract before its data is read."""
    try:
        opened = files.zip_member(archive, info, bound)
    except BoundedReadError as exc:
        said = f"declares {exc.size} bytes; this contract allows at most {bound}"
        raise CorruptCheckpointError(f"{path}: member {name!r} {said}") from None
    except Exception as exc:  # a member zipfile will not open (marked encrypted, a damaged local header)
        raise CorruptCheckpointError(f"{path}: member {name!r} cannot be opened ({exc})") from None
    try:
        with opened as member:
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


def read_members(path: str, contract_: dict, compare=None) -> dict:
    """Every member, each checked against what `contract_` implies before it is decompressed.

    `compare`, when given, is called with the saved contract member before any field's header is checked against
    `contract_`: a checkpoint of another experiment (other rows or features) is then refused by the comparison of
    the contracts, not as a file whose fields have the wrong shapes. That holds for a file larger than any
    checkpoint of `contract_` too: its contract member alone is read (bounded) and compared before the size is
    refused, so a larger experiment's checkpoint is another experiment's, and a file of this experiment that
    is too large is corrupt.
    """
    bounds = member_bytes(contract_)
    limit = sum(bounds.values()) + 1024 * len(bounds)
    if compare is not None:  # a file too large for this experiment may be another, larger one's: its contract first
        _contract_first(path, limit, bounds["contract"], contract_, compare)
    raw = _raw(path, limit)
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
    found = {"contract": _member(archive, names["contract"], "contract", bounds["contract"], contract_, path)}
    if compare is not None:
        compare(found["contract"])
    fields = sorted(MEMBERS - {"contract"})
    return {**found, **{name: _member(archive, names[name], name, bounds[name], contract_, path) for name in fields}}
