"""A property-based fuzzer (hypothesis) over NPZ structure and contract JSON.

Each example builds a file from a real checkpoint: members dropped, duplicated, renamed,
re-encoded (dtype, byte order, shape, Fortran order), stored or deflated, headers that
declare other shapes, bytes prepended or appended, and a contract that is any JSON value
or the real one with keys changed, removed or added, the integrity hash recomputed or
not. The property: restore refuses it with a shardlab error or returns the saved state
bit for bit; never another exception, never over its time bound, never more traced
memory than the file's size plus a small constant.
"""

import io
import json
import os
import time
import tracemalloc
import warnings
import zipfile

import numpy as np

from rig.torture.outcome import Tally, same_state
from shardlab.core import checkpoint
from shardlab.io import read_npz

BOUND = 10.0  # seconds one restore may take
MEMORY_SLACK = 1 << 20  # bytes of traced memory beyond the file's size and a valid restore's peak


def _strategies(members: dict, contract: dict):
    from hypothesis import strategies as st

    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=20)
    )
    values = st.recursive(
        scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=20
    )
    keys = sorted(contract)
    edited = st.lists(
        st.tuples(st.sampled_from(keys + ["extra_key"]), st.one_of(values, st.just("<drop>"))), max_size=3
    )
    contract_text = st.one_of(
        edited.map(lambda edits: json.dumps(_edit(contract, edits), sort_keys=True, allow_nan=True)),
        values.map(lambda v: json.dumps(v, allow_nan=True)),
        st.text(max_size=50),
        st.integers(1, 20_000).map(lambda d: "[" * d + "]" * d),
    )
    names = sorted(members)
    member_edit = st.tuples(
        st.sampled_from(names),
        st.sampled_from(["drop", "duplicate", "rename", "dtype", "byteorder", "shape", "fortran", "header", "keep"]),
        st.integers(0, 2**31),
    )
    return st.fixed_dictionaries(
        {
            "contract": st.one_of(st.none(), contract_text),
            "edits": st.lists(member_edit, max_size=3),
            "deflate": st.booleans(),
            "rehash": st.booleans(),
            "prefix": st.binary(max_size=40),
            "suffix": st.binary(max_size=40),
        }
    )


def _edit(contract: dict, edits) -> dict:
    found = dict(contract)
    for key, value in edits:
        if value == "<drop>":
            found.pop(key, None)
        else:
            found[key] = value
    return found


def _npy(value, fortran: bool = False) -> bytes:
    buffer = io.BytesIO()
    value = np.asarray(value)
    np.lib.format.write_array(buffer, np.asfortranarray(value) if fortran else value, allow_pickle=False)
    return buffer.getvalue()


def _change(name: str, value: np.ndarray, how: str, n: int):
    """(member name, .npy bytes) entries replacing `name` according to `how`."""
    if how == "drop":
        return []
    if how == "duplicate":
        return [(f"{name}.npy", _npy(value)), (f"{name}.npy", _npy(value))]
    if how == "rename":
        return [((f"{name}x.npy", f"../{name}.npy", f"{name}", f"sub/{name}.npy")[n % 4], _npy(value))]
    if how == "dtype" and value.dtype.kind != "U":
        return [(f"{name}.npy", _npy(value.astype((np.float64, np.int64, np.uint8, np.float16)[n % 4])))]
    if how == "byteorder" and value.dtype.kind != "U":
        return [(f"{name}.npy", _npy(value.astype(value.dtype.newbyteorder(">"))))]
    if how == "shape":
        return [(f"{name}.npy", _npy(np.resize(value, (n % 5, 2)) if value.size else value.reshape(1, -1)))]
    if how == "fortran" and value.ndim:
        return [(f"{name}.npy", _npy(np.resize(value, (2, max(1, value.size // 2))), fortran=True))]
    if how == "header":
        header = io.BytesIO()
        shape = ((1 << (20 + n % 24),), (n % 1000, n % 997), ())[n % 3]
        descr = value.dtype.str if value.dtype.kind != "U" else "<f4"
        np.lib.format.write_array_header_1_0(header, {"descr": descr, "fortran_order": False, "shape": shape})
        return [(f"{name}.npy", header.getvalue() + bytes(64))]
    return [(f"{name}.npy", _npy(value))]


def build(example: dict, members: dict) -> bytes:
    """The bytes of one fuzzed file."""
    arrays = dict(members)
    if example["contract"] is not None:
        arrays["contract"] = np.asarray(example["contract"])
    if example["rehash"]:
        try:
            arrays["integrity"] = np.asarray(checkpoint.integrity(arrays))
        except Exception:
            pass  # a field was dropped above: keep the old hash
    entries = []
    edits = {name: (how, n) for name, how, n in example["edits"]}
    for name, value in arrays.items():
        how, n = edits.get(name, ("keep", 0))
        entries += _change(name, value, how, n)
    buffer = io.BytesIO()
    compression = zipfile.ZIP_DEFLATED if example["deflate"] else zipfile.ZIP_STORED
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate names are the point
        with zipfile.ZipFile(buffer, "w", compression) as archive:
            for name, data in entries:
                archive.writestr(zipfile.ZipInfo(name), data, compress_type=compression)
    return example["prefix"] + buffer.getvalue() + example["suffix"]


def run(examples: int, folder, state: dict, contract: dict, mesh, seed: int) -> dict:
    """Fuzz `examples` files built from a real checkpoint of `state`; return counts per outcome."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    started, tally = time.perf_counter(), Tally()
    folder = os.fspath(folder)
    os.makedirs(folder)
    good = checkpoint.save(os.path.join(folder, "good.npz"), state, contract)
    members = read_npz(good)
    tracemalloc.start()
    checkpoint.restore(good, contract, mesh)
    legit_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    over, kinds = [], {"refused": 0, "exact": 0}

    @hypothesis_seed(seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=False,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(_strategies(members, contract))
    def one(example):
        raw = build(example, members)
        path = os.path.join(folder, "fuzzed.npz")
        with open(path, "wb") as handle:
            handle.write(raw)
        tally.trials += 1
        tracemalloc.start()
        outcome = tally.attempt(
            f"example {tally.trials}", lambda: checkpoint.restore(path, contract, mesh), state, BOUND
        )
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        kinds[outcome] = kinds.get(outcome, 0) + 1
        if peak > legit_peak + len(raw) + MEMORY_SLACK:
            over.append({"example": tally.trials, "peak_bytes": peak, "file_bytes": len(raw)})
        os.unlink(path)

    one()
    if not same_state(checkpoint.restore(good, contract, mesh), state):
        tally.count("lost", "the base checkpoint no longer restores exactly")
    result = tally.as_dict()
    result["details"] = {
        "legit_restore_peak_bytes": legit_peak,
        "memory_over_bound": over,
        "seconds": round(time.perf_counter() - started, 2),
    }
    result["clean"] = tally.clean and not over
    return result
