"""Corrupted files: mutate valid checkpoints in many ways; each must be refused or restore exactly.

"Exactly" means bit-identical to the state the mutated file was made from (a flipped
byte in a field zip ignores is harmless). Anything else accepted is a wrong accept,
and any exception that is not a CheckpointError is an unexpected error.
"""

import io
import os
import time
import warnings
import zipfile
from dataclasses import dataclass

import numpy as np

from rig.torture.outcome import BAD, Tally
from shardlab.core import checkpoint
from shardlab.core.files import sha256_file
from shardlab.core.schema import FIELDS
from shardlab.io import read_npz
from shardlab.verify import faults


@dataclass
class Bases:
    """Valid checkpoints to mutate: `main`, another step of the same run, one of another experiment."""

    path: str
    state: dict
    raw: bytes
    members: dict
    other: dict
    foreign: dict
    contract: dict

    @property
    def rows(self) -> int:
        """Number of sample ids (the length of `order`)."""
        return int(self.contract["features_shape"][0])


def pack(path: str, members: dict, allow_pickle: bool = False) -> None:
    """Write `members` as a fresh NPZ (valid zip CRCs: only our checks can refuse it)."""
    with open(path, "wb") as handle:
        if allow_pickle:
            _pickled_savez(handle, members)
        else:
            np.savez(handle, **members)


def _pickled_savez(handle, members: dict) -> None:
    with zipfile.ZipFile(handle, "w") as archive:
        for name, value in members.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.asanyarray(value), allow_pickle=True)
            archive.writestr(f"{name}.npy", buffer.getvalue())


def npy_bytes(value) -> bytes:
    """The .npy encoding of one array."""
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.asarray(value), allow_pickle=False)
    return buffer.getvalue()


def write_zip(path: str, entries: list[tuple[str, bytes]]) -> None:
    """A zip with exactly these (member name, bytes) entries, duplicates and odd names included."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries:
            archive.writestr(zipfile.ZipInfo(name), data)


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)


# Each mutation writes a file at `path` derived from the bases and returns the state a
# restore may return (None: nothing in the file is a valid state to accept).


def truncate(b, rng, path, i):
    _write(path, b.raw[: int(rng.integers(len(b.raw)))])
    return b.state


def flip_byte(b, rng, path, i):
    raw = bytearray(b.raw)
    raw[int(rng.integers(len(raw)))] ^= int(rng.integers(1, 256))
    _write(path, bytes(raw))
    return b.state


def overwrite_block(b, rng, path, i):
    raw = bytearray(b.raw)
    start, size = int(rng.integers(len(raw))), int(rng.integers(2, 33))
    raw[start : start + size] = rng.integers(0, 256, size=len(raw[start : start + size]), dtype=np.uint8).tobytes()
    _write(path, bytes(raw))
    return b.state


def append_or_prepend(b, rng, path, i):
    junk = rng.integers(0, 256, size=int(rng.integers(1, 200)), dtype=np.uint8).tobytes()
    _write(path, b.raw + junk if i % 2 == 0 else junk + b.raw)
    return b.state


def _edited(b, name, i):
    value = b.members[name].copy()
    if name in ("weights", "momentum"):
        j = i % value.size
        value[j] = np.nextafter(value[j], np.float32(np.inf) if i % 2 == 0 else np.float32(-np.inf))
    elif name == "key":
        value[i % 2] ^= np.uint32(1 << (i % 32))
    elif name == "order":
        j, k = i % b.rows, (i * 7 + 3) % b.rows
        k = (k + 1) % b.rows if k == j else k
        value[[j, k]] = value[[k, j]]  # still a valid permutation
    elif name == "cursor":
        value = np.asarray((int(value) + 1 + i) % (b.rows + 1), np.int64)
    else:  # step
        value = value + 1 + i
    return value


def repack_value(b, rng, path, i):
    """One element changed, file rebuilt cleanly: well-formed, plausible, and wrong."""
    name = FIELDS[i % len(FIELDS)]
    pack(path, {**b.members, name: _edited(b, name, i)})
    return b.state


def swap_member(b, rng, path, i):
    """One member taken from another checkpoint (another step of this run, or another experiment)."""
    names = sorted(b.members)
    name = names[i % len(names)]
    source = b.foreign if (i // len(names)) % 2 else b.other
    pack(path, {**b.members, name: source[name]})
    return b.state


DTYPES = {
    "weights": (np.float64, np.float16, np.int32),
    "momentum": (np.float64, np.int64),
    "key": (np.int32, np.uint64, np.float32),
    "order": (np.int64, np.uint32, np.float32),
    "cursor": (np.int32, np.float64, np.uint64),
    "step": (np.int32, np.float64),
}


def wrong_dtype(b, rng, path, i):
    name = sorted(DTYPES)[i % len(DTYPES)]
    dtype = DTYPES[name][(i // len(DTYPES)) % len(DTYPES[name])]
    pack(path, {**b.members, name: b.members[name].astype(dtype)})
    return b.state


def wrong_shape(b, rng, path, i):
    name = FIELDS[i % len(FIELDS)]
    value = b.members[name]
    if i % 3 == 0:
        value = np.concatenate([value.ravel(), value.ravel()[:1]])
    elif i % 3 == 1:
        value = value.reshape(1, -1)
    else:
        value = value.ravel()[:-1] if value.size > 1 else np.empty(0, value.dtype)
    pack(path, {**b.members, name: value})
    return b.state


def duplicate_member(b, rng, path, i):
    name = sorted(b.members)[i % len(b.members)]
    entries = [(f"{k}.npy", npy_bytes(v)) for k, v in b.members.items()]
    forged = (f"{name}.npy", npy_bytes(b.other[name]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile warns about the duplicate name we want
        write_zip(path, entries + [forged] if i % 2 == 0 else [forged] + entries)
    return b.state


def path_traversal(b, rng, path, i):
    name = sorted(b.members)[i % len(b.members)]
    bad = (f"../{name}.npy", f"/tmp/{name}.npy", f"sub/{name}.npy", f"..\\{name}.npy")[i % 4]
    entries = [(bad if k == name else f"{k}.npy", npy_bytes(v)) for k, v in b.members.items()]
    write_zip(path, entries)
    return b.state


def symlink(b, rng, path, i):
    target = (b.path, path + ".missing", os.devnull)[i % 3]
    os.symlink(target, path)
    return b.state


def _extra_member(arrays):
    arrays["weights_backup"] = arrays["weights"]


def _cursor_back(arrays):
    cursor = int(arrays["cursor"])
    arrays["cursor"] = np.asarray(cursor - 1 if cursor else 1, np.int64)


def _resealed(change):
    """`change`, then the integrity checksum recomputed as `save` computes it: a forgery the checksum cannot see."""

    def forged(arrays):
        change(arrays)
        arrays["integrity"] = np.asarray(checkpoint.integrity(arrays))

    return forged


# Member damage beyond what the course asks of any restore (faults.DAMAGE): our own restore also refuses an
# unknown member, a member edited after saving and a sampler the step does not imply; a correct learner file
# may accept them, so neither the notebook nor the checker shows them.
BEYOND_COURSE = {
    "an extra member": _extra_member,
    "cursor edited after saving": _cursor_back,  # refused by the checksum
    "cursor the step does not imply": _resealed(_cursor_back),  # refused by the sampler check
}
LISTED = {**faults.DAMAGE, **BEYOND_COURSE}  # every named member damage the campaign applies


def listed_damage(b, rng, path, i):
    """One entry of LISTED: the member damage the stage 3 notebook shows (`faults.DAMAGE`, one list serves both),
    or one beyond the course."""
    faults.tampered(b.path, path, LISTED[sorted(LISTED)[i % len(LISTED)]])
    return b.state


def huge_shape(b, rng, path, i):
    """A member whose header declares an enormous array (with only a few bytes behind it)."""
    name = sorted(b.members)[i % len(b.members)]
    dtype = b.members[name].dtype
    shape = ((1 << 40,), (1 << 31, 1 << 31), (1 << 28, 64))[i % 3]
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": dtype.str, "fortran_order": False, "shape": shape})
    entries = [
        (f"{k}.npy", header.getvalue() + b"\0" * 64 if k == name else npy_bytes(v)) for k, v in b.members.items()
    ]
    write_zip(path, entries)
    return b.state


def invalid_state_saved(b, rng, path, i):
    """A state no valid run produces, in the exact format `save` writes (a saver without save's own checks)."""
    state = dict(b.state)
    case = i % 8
    if case == 0:
        state["weights"] = np.where(np.arange(state["weights"].size) == 0, np.nan, state["weights"]).astype(np.float32)
    elif case == 1:
        state["momentum"] = np.full_like(state["momentum"], np.inf)
    elif case == 2:
        order = state["order"].copy()
        order[0] = order[1]  # a duplicated id
        state["order"] = order
    elif case == 3:
        state["order"] = state["order"] + 1  # ids out of range
    elif case == 4:
        state["cursor"] = b.rows + 1
    elif case == 5:
        state["cursor"] = -1
    elif case == 6:
        state["step"] = -1
    else:
        state["weights"] = np.full_like(state["weights"], -np.inf)
    pack(path, checkpoint.members(state, b.contract))
    return None


def contract_garbage(b, rng, path, i):
    texts = ("not json", "[1, 2, 3]", "{}", "null", '{"schema_version": 1}', "\u2603" * 40)
    if i % 7 == 6:
        pack(path, {**b.members, "contract": np.arange(3)})
    else:
        pack(path, {**b.members, "contract": np.asarray(texts[i % 7 % len(texts)])})
    return b.state


def not_a_checkpoint(b, rng, path, i):
    case = i % 6
    if case == 0:
        open(path, "wb").close()
    elif case == 1:
        _write(path, rng.integers(0, 256, size=len(b.raw), dtype=np.uint8).tobytes())
    elif case == 2:
        os.mkdir(path)
    elif case == 3:
        write_zip(path, [("README.txt", b"hello")])
    elif case == 4:
        _write(path, npy_bytes(b.members["weights"]))
    # case 5: nothing at the path at all
    return None


KINDS = {  # name: (mutations in the full campaign, generator)
    "truncate": (40, truncate),
    "flip_byte": (60, flip_byte),
    "overwrite_block": (20, overwrite_block),
    "append_or_prepend": (6, append_or_prepend),
    "repack_value": (36, repack_value),
    "swap_member": (28, swap_member),
    "wrong_dtype": (16, wrong_dtype),
    "wrong_shape": (12, wrong_shape),
    "listed_damage": (28, listed_damage),
    "duplicate_member": (8, duplicate_member),
    "path_traversal": (8, path_traversal),
    "symlink": (3, symlink),
    "huge_shape": (8, huge_shape),
    "invalid_state_saved": (8, invalid_state_saved),
    "contract_garbage": (7, contract_garbage),
    "not_a_checkpoint": (6, not_a_checkpoint),
}


def bases(folder: str, states: list[dict], contract: dict, foreign_contract: dict) -> Bases:
    """Save the valid checkpoints the mutations start from."""
    paths = [os.path.join(folder, f"base-{n}.npz") for n in ("main", "other", "foreign")]
    checkpoint.save(paths[0], states[-1], contract)
    checkpoint.save(paths[1], states[0], contract)
    checkpoint.save(paths[2], states[len(states) // 2], foreign_contract)  # another state, too
    with open(paths[0], "rb") as handle:
        raw = handle.read()
    return Bases(paths[0], states[-1], raw, *[read_npz(p) for p in paths], contract)


def run(scale: float, folder, states: list[dict], contract: dict, foreign_contract: dict, mesh, seed: int) -> dict:
    """Apply every kind of mutation (count x scale, at least one each); return counts per kind and overall."""
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    b = bases(folder, states, contract, foreign_contract)
    before = {name: sha256_file(os.path.join(folder, name)) for name in os.listdir(folder)}
    total, by_kind = Tally(), {}
    for kind, (count, mutate) in KINDS.items():
        tally = by_kind[kind] = Tally()
        for i in range(max(1, round(count * scale))):
            path = os.path.join(folder, f"{kind}-{i:03d}.npz")
            expected = mutate(b, rng, path, i)
            for t in (tally, total):
                t.trials += 1
            label = f"{kind} #{i}"
            outcome = tally.attempt(label, lambda p=path: checkpoint.restore(p, contract, mesh), expected)
            total.count(outcome, tally.failures[-1] if outcome in BAD else "")
    for tally in by_kind.values():
        total.errors.update(tally.errors)
    for name, digest in before.items():
        if sha256_file(os.path.join(folder, name)) != digest:
            total.lost += 1
    if Tally().attempt("base", lambda: checkpoint.restore(b.path, contract, mesh), b.state) != "exact":
        total.lost += 1
    result = total.as_dict()
    result["details"] = {
        "by_kind": {k: _short(t) for k, t in by_kind.items()},
        "seconds": round(time.perf_counter() - started, 2),
    }
    result["clean"] = total.clean
    return result


def _short(tally: Tally) -> dict:
    d = tally.as_dict()
    return {k: d[k] for k in ("trials", "refused", "restored_exact", "wrong_accepts", "unclear_errors", "error_types")}
