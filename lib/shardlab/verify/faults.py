"""Deliberate failures: resumes that lose one state field, and checkpoint files restore must refuse.

Runtime faults restore a real checkpoint and then reset one field (momentum to zero,
cursor to 0, key to the seed's key). File faults copy a checkpoint with one member
damaged; `refused` runs a call that must raise and proves no file was touched.
"""

import os
import struct
import zipfile

import jax
import numpy as np

from shardlab.core import files
from shardlab.core.config import FIXTURES, Config
from shardlab.core.errors import CheckpointExistsError, ContractMismatchError, CorruptCheckpointError, ShardlabError
from shardlab.core.fixtures import Dataset, check_dataset
from shardlab.core.sampler import epoch_batches
from shardlab.core.state import replicate
from shardlab.io import read_npz
from shardlab.verify import replay

FAULTS = ("none", "momentum", "cursor", "key")


class StaleStateError(ShardlabError, ValueError):
    """The state an implementation's `initial` returned does not fit the data it was given (another run's state)."""


def fitting_start(state: dict, data, seed: int) -> dict:
    """`state` if its weights and order fit `data` (shapes, and the order a permutation of its row ids); else
    StaleStateError naming initial, before any replay indexes the data with ids it does not hold."""
    rows, width = data.features.shape
    shapes = {name: tuple(np.shape(state[name])) for name in ("weights", "order") if name in state}
    order = np.asarray(state["order"]) if shapes.get("order") == (rows,) else None
    if shapes == {"weights": (width,), "order": (rows,)} and np.array_equal(np.sort(order), np.arange(rows)):
        return state
    what = f"shapes {shapes}" if order is None else f"an order that is not a permutation of 0..{rows - 1}"
    raise StaleStateError(
        f"initial({seed}, data, mesh) returned a state with {what} for data of {rows} rows x {width} features: a "
        "state made for other data, kept from an earlier call? initial must build the state from the seed, data "
        "and mesh of each call (rule:initial-fields); the fault table needs a state of these data"
    )


# Final-weight errors the original course reported with *its own* 23-row fixture (pattern, not values).
COURSE = {
    "seed17_batch7": {"none": 0.0, "momentum": 0.340, "cursor": 0.0400, "key": 0.0617},
    "seed29_batch10": {"none": 0.0, "momentum": 0.128, "cursor": 0.0938, "key": 0.173},
}


def inject(state: dict, fault: str, seed: int, mesh) -> dict:
    """A copy of `state` with one field reset as a careless restore would leave it."""
    if fault == "none":
        return dict(state)
    if fault == "momentum":
        return {**state, "momentum": replicate(np.zeros(np.shape(state["momentum"]), np.float32), mesh)}
    if fault == "cursor":
        return {**state, "cursor": 0}
    if fault == "key":
        return {**state, "key": np.asarray(jax.random.PRNGKey(seed), np.uint32)}
    raise ValueError(f"unknown fault {fault!r}; expected one of {FAULTS}")


def first_visible(fault: str, save_at: int, cursor: int, batch_size: int, rows: int) -> int | None:
    """The step at which a one-field reset after a save at step `save_at` (cursor `cursor`) first shows: the next
    step for momentum and cursor, the first step of the next permutation for the key; None for no fault."""
    if fault == "none":
        return None
    left = -(-(rows - cursor) // batch_size)  # batches still unread in the saved epoch
    return save_at + (left + 1 if fault == "key" else 1)


def save_step(num_examples: int, batch_size: int) -> int:
    """Where the fault runs save: one batch into the second epoch (mid-epoch if an epoch has >= 2 batches)."""
    return len(epoch_batches(num_examples, batch_size)) + 1


def fault_runs(impl, data, mesh, folder, seed: int, batch_size: int, epochs: int = 4, inject=inject) -> dict:
    """Save mid-epoch, continue uninterrupted, and resume once per fault (`inject(state, fault, seed, mesh)`
    makes each careless state); every record of it."""
    data = check_dataset(data)
    rows = data.features.shape[0]
    step = impl.make_step(mesh)
    contract = impl.contract(data, Config(seed=seed, batch_size=batch_size))
    at = save_step(rows, batch_size)
    total = epochs * len(epoch_batches(rows, batch_size))
    start = fitting_start(impl.initial(seed, data, mesh), data, seed)
    head = replay.run(start, data, batch_size, at, mesh, step, impl.transition)
    path = impl.save(os.path.join(folder, f"seed{seed}_batch{batch_size}.npz"), head["state"], contract)
    control = replay.run(head["state"], data, batch_size, total - at, mesh, step, impl.transition)
    runs = {}
    for fault in FAULTS:
        resumed = inject(impl.restore(path, contract, mesh), fault, seed, mesh)
        runs[fault] = replay.run(resumed, data, batch_size, total - at, mesh, step, impl.transition)
    cursor = int(head["state"]["cursor"])
    return {
        "save_step": at,
        "cursor": cursor,
        "total_steps": total,
        "next_epoch_step": replay.boundary(rows, cursor, batch_size, at),
        "control": control,
        "runs": runs,
    }


def row(fixture: str, seed: int, batch_size: int, fault: str, control: dict, resumed: dict) -> dict:
    """One machine-readable fault row: final-weight error, changed ids, first divergent step."""
    divergence = replay.first_divergence(control, resumed)
    return {
        "fixture": fixture,
        "seed": int(seed),
        "batch_size": int(batch_size),
        "fault": fault,
        "max_weight_error": replay.max_diff(control["weights"][-1], resumed["weights"][-1]),
        "ids_changed": replay.ids_mismatched(control["ids"], resumed["ids"]) > 0,
        "first_divergence_step": None if divergence is None else int(divergence["step"]),
    }


def fault_table(
    impl, data, mesh, folder, fixtures: dict = FIXTURES, epochs: int = 4, inject=inject
) -> tuple[list, dict]:
    """(rows, setup): four rows per fixture, and per fixture the save point and what first diverged; `inject`
    resets one field of a restored state per fault (a notebook passes the one it shows)."""
    rows, setup = [], {}
    for name, (seed, batch_size) in fixtures.items():
        found = fault_runs(impl, data, mesh, folder, seed, batch_size, epochs, inject)
        control = found["control"]
        for fault in FAULTS:
            rows.append(row(name, seed, batch_size, fault, control, found["runs"][fault]))
        divergence = {f: replay.first_divergence(control, found["runs"][f]) for f in FAULTS}
        setup[name] = {
            **{k: found[k] for k in ("save_step", "cursor", "total_steps", "next_epoch_step")},
            "diverged_fields": {f: (d or {}).get("fields", []) for f, d in divergence.items()},
            "key_fault_first_step_matches": found["runs"]["key"]["log"][0] == control["log"][0],
        }
    return rows, setup


def _snapshot(path: str):
    """Bytes hash, size and mtime of a file plus its folder listing (None if it does not exist)."""
    folder = os.listdir(os.path.dirname(os.path.abspath(path)))
    if not os.path.exists(path):
        return None, sorted(folder)
    stat = os.stat(path)
    return (files.sha256_file(path), stat.st_size, stat.st_mtime_ns), sorted(folder)


def refused(call, error: type, *paths) -> str:
    """Run `call`; require `error` and that no file in `paths` (or its folder) changed; return the message."""
    before = [_snapshot(os.fspath(p)) for p in paths]
    try:
        call()
    except error as exc:
        message = str(exc)
    else:
        raise AssertionError(f"expected {error.__name__}, but the call succeeded")
    after = [_snapshot(os.fspath(p)) for p in paths]
    changed = [os.fspath(p) for p, a, b in zip(paths, before, after) if a != b]
    if changed:
        raise AssertionError(f"a refused call modified {changed}; a refusal must leave the disk untouched")
    return message


def reason(message: str, width: int = 60) -> str:
    """The first line of a refusal's message, whole, without the path in front; for a contract, the field
    that differs (its values too when they fit in `width` characters)."""
    lines = message.splitlines()
    detail = [line.strip() for line in lines[1:] if line.startswith("  ")]
    if detail:
        field, _, values = detail[0].partition(": ")
        return detail[0] if len(detail[0]) <= width else f"{field}: the checkpoint's differs from this run's"
    head, sep, rest = lines[0].partition(".npz")
    return rest.lstrip(": ") if sep and "/" in head else lines[0]


def tampered(source, target, change) -> str:
    """Copy the checkpoint `source` to a new file `target` after `change(arrays)` edits its arrays in place."""
    arrays = read_npz(source)
    change(arrays)
    return written(target, arrays)


def written(target, arrays: dict) -> str:
    """A new NPZ file `target` holding `arrays` (member name -> array), in their order; its path.

    A search that makes many copies of one checkpoint reads it once and writes each copy with this."""
    with open(os.fspath(target), "xb") as handle:
        np.savez(handle, **arrays)
    return os.fspath(target)


def truncated(source, target) -> str:
    """Copy the first half of `source` to a new file `target` (a save cut short, seen without the rename)."""
    with open(os.fspath(source), "rb") as handle:
        raw = handle.read()
    with open(os.fspath(target), "xb") as handle:
        handle.write(raw[: len(raw) // 2])
    return os.fspath(target)


def unreadable(source, folder) -> dict:
    """What -> a new file in `folder` that no restore may read as a checkpoint: `source` cut in half and a text file
    named .npz."""
    cut, text = truncated(source, os.path.join(folder, "truncated.npz")), os.path.join(folder, "notes.npz")
    with open(text, "x") as handle:
        handle.write("weights: 0.1 0.2 0.3\n")
    return {"truncated file": cut, "not an NPZ file": text}


def _zip_headers(raw: bytes) -> list[tuple[int, int]]:
    """(offset of a member's local header, offset of its central directory entry) for every member of the zip
    archive `raw`, read from its end-of-central-directory record; [] if `raw` holds none."""
    end = raw.rfind(b"PK\x05\x06")
    if end < 0 or len(raw) < end + 22:
        return []
    count, _, start = struct.unpack_from("<HII", raw, end + 10)
    found, at = [], start
    for _ in range(count):
        if raw[at : at + 4] != b"PK\x01\x02":
            return []
        names, extra, comment = struct.unpack_from("<HHH", raw, at + 28)
        found.append((struct.unpack_from("<I", raw, at + 42)[0], at))
        at += 46 + names + extra + comment
    return found


def archive_damaged(source, target, how: str) -> str | None:
    """Copy the NPZ `source` to a new file `target` with the archive's own records damaged (ARCHIVE_DAMAGE[how]):
    every member marked encrypted (zipfile then refuses to read it without a password), or the first member's
    CRC-32 changed (its bytes no longer match it). None if `source` is no zip archive (nothing written)."""
    with open(os.fspath(source), "rb") as handle:
        raw = bytearray(handle.read())
    headers = _zip_headers(bytes(raw))
    if not headers:
        return None
    if how == "every member marked encrypted":
        for local, central in headers:
            raw[local + 6] |= 1
            raw[central + 8] |= 1
    else:
        local, central = headers[0]
        raw[local + 14] ^= 1
        raw[central + 16] ^= 1
    with open(os.fspath(target), "xb") as handle:
        handle.write(bytes(raw))
    return os.fspath(target)


ARCHIVE_DAMAGE = ("every member marked encrypted", "a member's CRC-32 changed")


def _set(name, value_of):
    def change(arrays):
        arrays[name] = value_of(arrays[name])

    return change


def _drop(name):
    def change(arrays):
        del arrays[name]

    return change


def _duplicate_id(order):
    order = order.copy()
    order[1] = order[0]
    return order


def _out_of_range_id(order):
    order = order.copy()
    order[0] = len(order)
    return order


def _nan_first(weights):
    weights = weights.copy()
    weights[0] = np.nan
    return weights


# name -> how the copy is damaged: what the course requires of *any* restore (docs/stage3.md: shapes, dtypes,
# finite parameters, a valid permutation, cursor bounds, a non-negative step, missing momentum); every one must
# raise CorruptCheckpointError on restore. The stage 3 notebook shows each and the checker probes each on a
# learner's file; `python -m rig.torture` applies these and the damage beyond the course that our own restore
# also refuses (rig/torture/corrupt.py, BEYOND_COURSE) in its corrupted_files category.
DAMAGE = {
    "missing momentum": _drop("momentum"),
    "duplicate id in order": _set("order", _duplicate_id),
    "out-of-range id in order": _set("order", _out_of_range_id),
    "object array": _set("weights", lambda w: np.array(list(w), dtype=object)),
    "non-finite weights": _set("weights", _nan_first),
    "big-endian weights": _set("weights", lambda w: w.astype(">f4")),
    "weights of another width": _set("weights", lambda w: np.concatenate([w, w[:1]])),
    "cursor out of range": _set("cursor", lambda c: np.asarray(10**6, np.int64)),
    "negative step": _set("step", lambda s: np.asarray(-1, np.int64)),
    "key dtype": _set("key", lambda k: k.astype(np.int64)),
    "key shape": _set("key", lambda k: np.zeros(4, np.uint32)),
    "contract not JSON": _set("contract", lambda c: np.asarray("{not json")),
}
COURSE_DAMAGE = tuple(DAMAGE)  # their names, in the order the notebook shows them


def _headers(path) -> dict:
    """Member name (without .npy) -> (dtype, shape), read from each member's .npy header without loading it."""
    found = {}
    with zipfile.ZipFile(os.fspath(path)) as archive:
        for info in archive.infolist():
            with archive.open(info) as member:
                version = np.lib.format.read_magic(member)
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                shape, _, dtype = read(member)
            found[info.filename.removesuffix(".npy")] = (str(dtype), shape)
    return found


def _changed(original, copy) -> str:
    """What a damaged copy dropped or changed, read back from both files: the members' headers, then their values."""
    old, new = _headers(original), _headers(copy)
    notes = [f"{m} removed" for m in old if m not in new] + [f"{m} added" for m in new if m not in old]
    with np.load(os.fspath(original)) as x, np.load(os.fspath(copy)) as y:
        for m in (m for m in old if m in new):
            if old[m] != new[m]:
                notes.append(f"{m}: {old[m][0]} {old[m][1]} -> {new[m][0]} {new[m][1]}")
            elif not np.array_equal(x[m], y[m]):
                notes.append(f"{m}: values changed")
    return "; ".join(notes)


def refusals(impl, checkpoint, state: dict, contract: dict, data, config, mesh, folder) -> tuple[list, dict, list]:
    """Stage 3a's refusals, each run through `refused`: restore given every COURSE_DAMAGE copy of `checkpoint`
    (made in `folder`), a truncated file and a text file, the intact file under another experiment's contract (one
    data value changed, the batch size one more), and save asked to write `checkpoint` again.

    (rows: case, error, message, files involved, whether every one of them is unchanged; case -> what its file is;
    the damage cases not built because the file names that member otherwise)."""
    os.makedirs(folder, exist_ok=True)
    rows, not_built = [], []
    made = {
        "truncated file": "the first half of the saved file's bytes",
        "not an NPZ file": "a text file named .npz",
        "different data (one value changed)": "the saved file; the run's data differ",
        "different configuration (batch size)": "the saved file; the run's batch size differs",
        "existing checkpoint path": "the saved file; save is asked to write that name again",
    }

    def refuse(case, call, error, *paths):
        before = [_snapshot(os.fspath(p)) for p in paths]
        message = refused(call, error, *paths)
        unchanged = [_snapshot(os.fspath(p)) for p in paths] == before
        rows.append(
            {"case": case, "error": error.__name__, "message": message, "files": len(paths), "unchanged": unchanged}
        )

    for case in COURSE_DAMAGE:
        try:
            copy = tampered(checkpoint, os.path.join(folder, case.replace(" ", "_") + ".npz"), DAMAGE[case])
        except KeyError as missing:
            not_built.append(f"{case} (no member {missing})")
            continue
        made[case] = _changed(checkpoint, copy)
        refuse(case, lambda copy=copy: impl.restore(copy, contract, mesh), CorruptCheckpointError, copy, checkpoint)
    cut, text = unreadable(checkpoint, folder).values()
    refuse("truncated file", lambda: impl.restore(cut, contract, mesh), CorruptCheckpointError, cut, checkpoint)
    refuse("not an NPZ file", lambda: impl.restore(text, contract, mesh), CorruptCheckpointError, text)
    features = data.features.copy()
    features[3, 2] += 1.0  # same shape and dtype, one value changed
    other_data = impl.contract(Dataset(features, data.targets.copy()), config)
    other_size = impl.contract(data, Config(seed=config.seed, batch_size=config.batch_size + 1))
    for case, other in (
        ("different data (one value changed)", other_data),
        ("different configuration (batch size)", other_size),
    ):
        refuse(case, lambda other=other: impl.restore(checkpoint, other, mesh), ContractMismatchError, checkpoint)
    refuse(
        "existing checkpoint path", lambda: impl.save(checkpoint, state, contract), CheckpointExistsError, checkpoint
    )
    assert len(rows) == len(os.listdir(folder)) + 3  # one per damaged copy, plus the three refusals of an intact file
    return rows, {r["case"]: made[r["case"]] for r in rows}, not_built
