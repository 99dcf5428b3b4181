"""Control runs, resumed runs and their field-by-field comparison, step by step.

A *record* is what one run leaves: the ids and loss of every step, all six state
fields after every step, and a fingerprint log. Comparing two records aligned on
`step` shows whether a resumed run continued the control or where it left it.
"""

import json
import os

import numpy as np

from shardlab import outdir
from shardlab.core import files
from shardlab.core.sampler import draw
from shardlab.core.schema import FIELDS, SAMPLER, host_copy
from shardlab.core.state import transition as reference_transition
from shardlab.errors import CheckpointError, ShardlabError, UsageError
from shardlab.io import read_npz
from shardlab.verify import step_fingerprint

OWNER = "stage3a_checkpoint"  # the manifest section of the files `fresh_folder` may replace
# what the stage 3 notebook writes into its folder (fnmatch patterns of top-level names); `.tmp-*` are the
# temporaries of a save that was killed (core/checkpoint.py, orbax_io.py)
WRITES = ("checkpoint.npz", "control.npz", "orbax", "bad", "faults", "publish_demo", ".tmp-*")


class ReplayMismatchError(ShardlabError, AssertionError):
    """A resumed run did not reproduce the control run it should continue."""


def run(state, data, batch_size: int, steps: int, mesh, step, transition=reference_transition) -> dict:
    """Advance `steps` transitions from `state`; return the record and (under "state") the final state."""
    states, ids, losses = [], [], []
    for _ in range(int(steps)):
        state, loss, batch_ids = transition(state, data, batch_size, step, mesh)
        states.append(host_copy(state))  # on the host at once, as the step left it
        ids.append(batch_ids)
        losses.append(loss)
    return {**record(states, ids, losses, data), "state": state}


def record(states: list, ids: list, losses: list, data) -> dict:
    """The record of a run from its states after each step (host copies), the ids each step read, its losses.

    The same record `run` returns (without the final state): every field per step on the host, the ids, the
    losses and a short fingerprint per step, so a notebook that writes its own loop compares like `run`.
    """
    if not len(states) == len(ids) == len(losses):
        counts = f"{len(states)}, {len(ids)}, {len(losses)}"
        raise UsageError(f"a record needs one state, ids and loss per step, not {counts}")
    after = {name: [] for name in FIELDS}
    log = []
    for state, batch_ids, loss in zip(states, ids, losses):
        host = host_copy(state)
        for name in FIELDS:
            after[name].append(host[name])
        log.append(step_fingerprint.entry(host["step"], data, batch_ids, host["weights"], loss))
    found = {name: np.asarray(values) for name, values in after.items()}
    found.update(ids=[np.asarray(i, np.int64) for i in ids], losses=np.asarray([float(x) for x in losses], np.float64))
    found["log"] = log
    return found


def max_diff(a, b) -> float:
    """The largest absolute difference of two arrays, in float64 (int64 for integers); inf if their shapes differ."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    wide = np.float64 if a.dtype.kind == "f" else np.int64
    return float(np.max(np.abs(a.astype(wide) - b.astype(wide))))


def ids_mismatched(ids_a: list, ids_b: list) -> int:
    """How many sample ids differ position by position; every missing or extra id counts as one."""
    longer = ids_a if len(ids_a) > len(ids_b) else ids_b
    count = sum(len(extra) for extra in longer[min(len(ids_a), len(ids_b)) :])
    for a, b in zip(ids_a, ids_b):
        shared = min(len(a), len(b))
        count += int(np.count_nonzero(np.asarray(a[:shared]) != np.asarray(b[:shared])))
        count += abs(len(a) - len(b))
    return count


def compare(control: dict, resumed: dict) -> dict:
    """Max absolute difference per field over every step, mismatched ids, losses, coverage."""
    diffs = {name: max_diff(control[name], resumed[name]) for name in FIELDS}
    steps = len(resumed["ids"])
    rows = np.asarray(resumed["order"]).shape[-1] if steps else 1
    return {
        **diffs,
        "ids_mismatched": ids_mismatched(control["ids"], resumed["ids"]),
        "losses": max_diff(control["losses"], resumed["losses"]),
        "steps_compared": int(min(len(control["ids"]), steps)),
        "epochs_covered": float(sum(len(i) for i in resumed["ids"]) / rows),
    }


def step_rows(control: dict, resumed: dict) -> list[dict]:
    """One row per resumed step beside the control: its ids, both losses, max |Δw|, and whether all six fields,
    the ids and the loss are exactly equal (the table stage 3b shows a reader)."""
    rows = []
    for k, number in enumerate(resumed["step"]):
        same = [max_diff(control[name][k], resumed[name][k]) == 0 for name in FIELDS]
        same += [max_diff(control["ids"][k], resumed["ids"][k]) == 0, control["losses"][k] == resumed["losses"][k]]
        rows.append(
            {
                "step": int(number),
                "ids": np.asarray(resumed["ids"][k]).tolist(),
                "control loss": float(control["losses"][k]),
                "resumed loss": float(resumed["losses"][k]),
                "max |Δw|": max_diff(control["weights"][k], resumed["weights"][k]),
                "equal": all(same),
            }
        )
    return rows


def first_differences(control: dict, other: dict) -> dict:
    """Per compared quantity (each field, the ids, the loss): the first step after which it differs, or None."""
    shared = min(len(control["ids"]), len(other["ids"]))
    steps = [int(s) for s in control["step"][:shared]]
    return {
        name: next((steps[i] for i in range(shared) if max_diff(control[name][i], other[name][i]) != 0), None)
        for name in (*FIELDS, "ids", "losses")
    }


def first_divergence(control: dict, other: dict):
    """The first step at which the fingerprint logs differ (None if they agree)."""
    return step_fingerprint.first_divergence(control["log"], other["log"])


def check_recovery(recovery: dict, weight_tolerance: float = 0.0) -> None:
    """Raise ReplayMismatchError unless sampler fields, ids and step counts match exactly."""
    exact = [name for name in (*SAMPLER, "ids_mismatched") if recovery[name] != 0]
    if recovery["steps_compared"] < 1:
        exact.append("steps_compared")
    if exact:
        raise ReplayMismatchError(
            f"the resumed run left the control in {exact} ({ {k: recovery[k] for k in exact} }); the sampler "
            "must match exactly. Restore every field (key, order, cursor, step) from the checkpoint."
        )
    loose = [k for k in ("weights", "momentum", "losses") if not recovery[k] <= weight_tolerance]
    if loose:
        raise ReplayMismatchError(
            f"{loose} differ by more than {weight_tolerance} ({ {k: recovery[k] for k in loose} }); "
            "the optimiser state was not restored bit for bit"
        )


def save_record(path, record: dict) -> str:
    """Write a record (without the live state) as one NPZ at a new `path`; ids are stored flat.

    Published like a checkpoint (`shardlab.core.files.publish_new`): never over an existing file.
    """
    path = os.fspath(path)
    taken = CheckpointError(f"{path} already exists; records are never overwritten, use a new folder")
    if os.path.lexists(path):
        raise taken
    lengths = np.asarray([len(i) for i in record["ids"]], np.int64)
    flat = np.concatenate(record["ids"]) if record["ids"] else np.zeros(0, np.int64)
    arrays = {name: np.asarray(record[name]) for name in FIELDS}
    arrays.update(ids=flat.astype(np.int64), ids_lengths=lengths, losses=np.asarray(record["losses"], np.float64))
    arrays["log"] = np.asarray(json.dumps(record["log"]))
    fd, tmp = files.temporary(os.path.dirname(os.path.abspath(path)), ".npz")
    try:
        return files.publish_new(fd, tmp, path, lambda handle: np.savez(handle, **arrays))
    except FileExistsError:
        raise taken from None


def load_record(path) -> dict:
    """Read a record written by `save_record` (no pickles)."""
    arrays = read_npz(path)
    bounds = np.cumsum(arrays["ids_lengths"])[:-1]
    record = {name: arrays[name] for name in FIELDS}
    record.update(
        ids=list(np.split(arrays["ids"], bounds)) if len(arrays["ids_lengths"]) else [],
        losses=arrays["losses"],
        log=json.loads(str(arrays["log"][()])),
    )
    return record


def fresh_folder(path) -> str:
    """Create `path` for the stage 3 notebook's files, removing what an earlier run of it wrote.

    That is the files a finished run recorded (`seal`) and, after a run that stopped early, the
    entries named in `WRITES`. Anything else in `path` (a person's notes, an edited file) is
    refused with OutputFolderError, which says what to do; see `shardlab.outdir`.
    """
    return str(outdir.owned_folder(path, OWNER, WRITES))


def seal(path) -> None:
    """Record every file now under `path` as the stage 3 notebook's, for the next `fresh_folder` to replace."""
    outdir.seal(path, OWNER)


def boundary(num_examples: int, cursor: int, batch_size: int, step: int) -> int:
    """Number of the first step that reads a new permutation, from cursor arithmetic alone."""
    remaining = -(-(num_examples - cursor) // batch_size)  # batches left in this epoch
    return step + remaining + 1


def drawn_at_once(state: dict) -> dict:
    """Key, order and cursor of `state` as a sampler that draws the next epoch at once would hold them.

    The course allows both forms at an epoch's end: the cursor at the row count, the next call
    drawing the new order (`core.sampler.advance`), or the order drawn as soon as the last batch is taken
    (cursor 0, key split once more). In this form the two are equal, so two correct runs'
    sampler fields can be compared exactly; the caller's dict is untouched.
    """
    key, order, cursor = np.asarray(state["key"], np.uint32), np.asarray(state["order"]), int(state["cursor"])
    if cursor >= len(order):
        key, order = draw(key, len(order))
        cursor = 0
    return {"key": key, "order": np.asarray(order, np.int32), "cursor": cursor}
