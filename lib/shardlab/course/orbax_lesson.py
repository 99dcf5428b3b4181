"""The Orbax lesson's fixture and recorded receipt: the course source `002_*`, replayed with our pipeline.

That lesson builds a 16 x 8 fixture from its own formulas (NumPy seed 41, targets from a fixed
linear rule), trains with momentum 0.8 and learning rate 0.04 in batches of 8 on four logical
CPU devices, saves after one step with Orbax, restores onto a target that carries the mesh,
and runs three transitions across the epoch boundary (then two more). `RECEIPT` holds what its
recorded run printed; `compare` sets our observations beside it, rule by rule. `UNSTATED`
says what its text does not give, so a comparison that needs it cannot be exact.
"""

import contextlib
import os

import numpy as np

from shardlab.core.config import Config
from shardlab.core.fixtures import Dataset
from shardlab.course import watch
from shardlab.verify import oracle

DEVICES = 4  # the lesson derives every size from the device count
ROWS, WIDTH, BATCH = 4 * DEVICES, 2 * DEVICES, 2 * DEVICES  # 16 rows, 8 features, batches of 8
DATA_SEED = 41  # numpy default_rng seed of the features
SEED = 17  # PRNGKey seed: split once, the second half draws the first permutation
LEARNING_RATE, DECAY = 0.04, 0.8
TOLERANCE = {"rtol": 2e-5, "atol": 2e-6}  # the lesson's own float32 tolerance; sample ids must match exactly
WRONG_KEY_SEED = 999  # the lesson's delayed-failure experiment replaces the key with PRNGKey(999)
REPLAYED = 5  # transitions after the restore: the three it prints, then the two of its exercise

RECEIPT = {  # printed by the lesson's recorded CPU run (JAX 0.9.2)
    "backend": "cpu",
    "processes": 1,
    "devices": 4,
    "restored_step": 1,
    "restored_cursor": 8,
    "next_ids": [[12, 5, 4, 1, 8, 13, 2, 11], [9, 0, 7, 15, 11, 13, 8, 14], [1, 6, 5, 4, 3, 12, 2, 10]],
    "losses": [0.5069587826728821, 0.19637340307235718, 0.1798383891582489],
    "momentum_gap": 0.0195157527923584,  # max |w| difference one step after a restore that zeroed momentum
    # after a restore whose key is PRNGKey(999): "Current-epoch batch matches; next-epoch batch exposes the wrong key."
    "wrong_key": {"first_batch_same": True, "next_epoch_same": False},
    "jax": "0.9.2",
}

UNSTATED = {  # what the receipt or the text leaves out, and what we therefore compare it with instead
    "losses": "the order in which XLA's CPU reduction summed in the recorded run, under another JAX version: "
    "the text promises only its tolerance (rtol 2e-5, atol 2e-6), so that is the rule; max |diff| shows "
    "whether this run also matched bit for bit",
    "momentum_gap": "the same summation order, the same rule as the losses",
    "transitions 4 and 5": "the receipt prints only that they agree, no ids or losses: we compare them with "
    "our own uninterrupted run and with NumPy, not with recorded numbers",
    "step 1": "the receipt does not print the batch or loss of the step before the checkpoint; "
    "only its result (step 1, cursor 8) is recorded",
}


def fixture() -> Dataset:
    """The lesson's data: normal features from default_rng(41), targets = features @ linspace(-0.3, 0.4)."""
    features = np.random.default_rng(DATA_SEED).normal(size=(ROWS, WIDTH)).astype(np.float32)
    truth = np.linspace(-0.3, 0.4, WIDTH, dtype=np.float32)
    return Dataset(features, (features @ truth).astype(np.float32))


def config() -> Config:
    """Its seed, batch, optimiser constants and device count, as our contract records them."""
    return Config(seed=SEED, batch_size=BATCH, learning_rate=LEARNING_RATE, decay=DECAY, num_devices=DEVICES)


def checked(
    transition, state: dict, data: Dataset, step, mesh, gaps: list | None = None
) -> tuple[dict, float, np.ndarray]:
    """One transition, its update checked against the NumPy formula (float64) within the lesson's tolerance.

    `gaps`, if given, receives the largest absolute difference from NumPy (weights, momentum or loss), so a cell
    can print how close the transitions came rather than only that none failed.
    """
    before_w, before_v = np.asarray(state["weights"]), np.asarray(state["momentum"])
    new, loss, ids = transition(state, data, BATCH, step, mesh)
    x, y = data.features[ids], data.targets[ids]
    w, v, expected_loss, _ = oracle.momentum_step(x, y, np.ones(len(ids)), before_w, before_v, LEARNING_RATE, DECAY)
    if gaps is not None:
        found = (np.asarray(new["momentum"]) - v, np.asarray(new["weights"]) - w, np.asarray(loss) - expected_loss)
        gaps.append(max(float(np.max(np.abs(d))) for d in found))
    np.testing.assert_allclose(np.asarray(new["momentum"]), v, **TOLERANCE)
    np.testing.assert_allclose(np.asarray(new["weights"]), w, **TOLERANCE)
    np.testing.assert_allclose(loss, expected_loss, **TOLERANCE)
    return new, loss, ids


def first_new_permutation(saved: dict, id_batches) -> int | None:
    """The number (from 1) of the first transition after `saved` whose ids are not the rest of its saved order.

    The transitions before it read on in the saved `order`; it reads a permutation drawn from the
    key. Read from the ids alone, so it is the same whether the sampler draws the next epoch when
    the next batch needs it (the cursor waits at ROWS) or as soon as the last batch is taken (the
    cursor back to 0). None if every transition read the saved order.
    """
    rest = np.asarray(saved["order"])[int(saved["cursor"]) :].tolist()
    for number, ids in enumerate(id_batches, start=1):
        ids = np.asarray(ids).tolist()
        if ids != rest[: len(ids)]:  # once the saved order is used up, rest is [] and every batch differs
            return number
        rest = rest[len(ids) :]
    return None


def _row(quantity: str, recorded, observed, exact: bool) -> dict:
    """One comparison: exact for integers and ids, within TOLERANCE for floats."""
    if exact:
        equal, diff = recorded == observed, None
    else:
        a, b = np.asarray(recorded, np.float64), np.asarray(observed, np.float64)
        equal = bool(np.allclose(b, a, **TOLERANCE))
        diff = float(np.max(np.abs(a - b)))
    rule = "exact" if exact else f"rtol {TOLERANCE['rtol']}, atol {TOLERANCE['atol']}"
    row = {"quantity": quantity, "recorded": recorded, "observed": observed, "rule": rule}
    return {**row, "equal": bool(equal), "max_abs_diff": diff}


def compare(observed: dict) -> list[dict]:
    """Our observations beside the receipt: one row per recorded quantity (keys as in RECEIPT)."""
    exact = ("backend", "processes", "devices", "restored_step", "restored_cursor", "next_ids", "wrong_key")
    rows = [_row(k, RECEIPT[k], observed[k], True) for k in exact]
    return rows + [_row(k, RECEIPT[k], observed[k], False) for k in ("losses", "momentum_gap")]


def publish_order(events: list, final: str) -> dict:
    """How a traced save published the folder `final`, from `(event, paths)` in the order they happened: whether a
    rename gave it that name (`renamed`), whether commit_success.txt was the last write before that rename and sat
    outside `final` (`marker_last`), and how many operations touched `final` before it (`early`)."""
    renames = [i for i, (event, _) in enumerate(events) if event == "os.rename"]
    before = events[: renames[-1]] if renames else events
    writes = [paths[0] for event, paths in before if event == "open"]
    last = writes[-1].replace("\\", "/") if writes else ""
    return {
        "renamed": int(any(events[i][1][1:] == [final] for i in renames)),
        "marker_last": int(last.rsplit("/", 1)[-1] == "commit_success.txt" and last.rsplit("/", 1)[0] != final),
        "early": sum(1 for _, paths in before for p in paths if p.replace("\\", "/").split("/")[0] == final),
    }


_AUDITED = ("os.mkdir", "open", "os.remove", "os.rename")
_WORDS = {"os.mkdir": "make folder", "open": "write", "os.remove": "remove", "os.rename": "rename"}


@contextlib.contextmanager
def watch_writes(folder: str):
    """Yield a list that fills, in order, with (event, paths relative to `folder`) for each folder made, file
    written, removal and rename inside `folder` while the block runs (stage 3a's audit hook, `watch.audited`,
    called from every thread). What C++ code (TensorStore) writes never reaches Python's audit hooks and is not
    in it."""
    here, events = os.path.abspath(folder), []

    def note(event: str, args: tuple) -> None:
        if event not in _AUDITED:
            return
        named = args[:2]
        if event == "open":  # (path, mode, flags): keep only opens that write
            mode, flags = args[1], args[2]
            writes = any(c in mode for c in "wax+") if isinstance(mode, str) else flags & (os.O_WRONLY | os.O_RDWR)
            named = args[:1] if writes else ()
        paths = watch.paths_in(named, here)
        if paths and here not in paths:  # inside the folder, never the folder itself
            events.append((event, [os.path.relpath(p, here) for p in paths]))

    with watch.audited(note):
        yield events


def trace_lines(events: list) -> list[str]:
    """The trace in order, one line per run of equal operations (Orbax may write a file twice)."""
    steps: list = []
    for event, paths in events:
        if steps and steps[-1][0] == (event, paths):
            steps[-1][1] += 1
        else:
            steps.append([(event, paths), 1])
    return [
        f"  {_WORDS[event]:11s} {' -> '.join(paths)}" + (f" ({times} times in a row)" if times > 1 else "")
        for (event, paths), times in steps
    ]
