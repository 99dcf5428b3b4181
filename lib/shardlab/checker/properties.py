"""The course's rules as properties of one `Case`: each raises `Miss` where the learner's code leaves the oracle.

Every expected value comes from `verify.oracle` (the recipe, coverage arithmetic, the NumPy
formulas) and `checker.damage`, never from the reference implementation. `search.py` draws the
cases, shrinks a failing one and turns the minimal case into a verdict.
"""

import functools
import json
import os
import re
import shutil
import tempfile
import unicodedata
from dataclasses import replace

import jax
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import shardlab.checker.causes as known_causes
import shardlab.checker.damage as damage
import shardlab.checker.formulas as formulas
import shardlab.checker.sampler_diagnosis as recipe
import shardlab.checker.wire as wire
from shardlab import errors
from shardlab.checker.common import (
    CheckFailed,
    batch_arrays,
    changed_inputs,
    expect,
    fingerprint,
    host,
    leaves,
    placed,
    raised_where,
    sharding_of,
    snapshot,
    typed_key,
)
from shardlab.checker.domain import (
    Case,
    data_for,
    given,
    hyperparameters,
    mesh_positions,
    numbers_words,
    typed,
    walk_calls,
    walk_data,
)
from shardlab.checker.early import HOME
from shardlab.checker.padding import check_padding
from shardlab.checker.probes import probe
from shardlab.core.config import DECAY, LEARNING_RATE, Config
from shardlab.core.devices import AXIS, make_mesh
from shardlab.core.fixtures import Dataset, timing_fixture
from shardlab.core.schema import FIELDS
from shardlab.core.update import count_all_reduce
from shardlab.io import read_npz
from shardlab.verify import faults, oracle

TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}  # one float32 step against float64 NumPy, from the learner's own state
BATCH_SPECS = {"features": P(AXIS, None), "targets": P(AXIS), "mask": P(AXIS)}


class Miss(Exception):
    """Where one case leaves the oracle: what was expected, what was observed, and why."""

    def __init__(self, expected, observed, why: str, labels: tuple = ()):
        super().__init__(why)
        self.expected, self.observed, self.why = expected, observed, why
        self.labels = labels  # the inputs a property found ignored: what a shrink needs to ask again (`focused`)


def focused(ctx, label: str) -> bool:
    """Whether a property asks about input `label` on this case: every input, except while a shrink asks only
    about the inputs the failing case was found to ignore (`search.shrink`; the minimal case is asked in full)."""
    focus = getattr(ctx, "focus", None)
    return focus is None or label in focus


def need(ok: bool, expected, observed, why: str) -> None:
    if not ok:
        raise Miss(expected, observed, why)


def near(observed, expected) -> bool:
    observed, expected = np.asarray(observed, np.float64), np.asarray(expected, np.float64)
    return observed.shape == expected.shape and oracle.finite(observed) and np.allclose(observed, expected, **TOLERANCE)


# the course's refusals of another experiment's checkpoint (rule:contract-first): the saved contract is compared
# before anything is accepted, so another experiment's file is refused with ContractMismatchError whether or not its
# arrays have the expected shapes (other rows, another feature width). A damaged contract member (missing, partial,
# a superset) may be refused as corrupt or as another experiment's.
OTHER_EXPERIMENT = (errors.ContractMismatchError, errors.CorruptCheckpointError)
RESHAPED = "the same bytes as other rows and features"
FIELDS_FIRST = (
    ": the checkpoint's arrays have another experiment's shapes and were checked against the expected contract's "
    "shapes before the contracts were compared -> read the saved contract and compare it first, then check the fields"
)
# a checkpoint of 1 row and LARGER_FEATURES features (saved by the learner's own initial, contract and save) restored
# as the case's experiment: its weights and momentum alone are larger than any checkpoint of the case's (at most 64
# rows and 9 features) can be, and its contract is still compared before the size is refused (rule:contract-first).
# One row, so the learner's permutation is the one every 1-row case compiles. Drawn where the case saves at the start
# (the save point a shrink keeps), so every search meets it.
LARGER_FEATURES = 16384
LARGER = f"features: a file of {LARGER_FEATURES:,} features, larger than any checkpoint of this experiment"
SIZE_FIRST = (
    ": the checkpoint holds a larger experiment's arrays and was refused for its size or their shapes before the "
    "contracts were compared -> read the saved contract (a small member) and compare it first, then bound the rest"
)
OTHER_SHAPES = ("rows", "feature width", RESHAPED, LARGER)  # the inputs whose change changes the arrays' shapes
# large but finite values a restore must accept: "finite" is np.isfinite, not a bound on the magnitude
LARGE = np.float32(3e38)
# a step a long run reaches: past what 16 bits hold (signed or not), well inside 32 (cursor and step are integers of
# any width that holds the run's values; restore must give back the step saved)
LONG_RUN_STEP = 2**17 + 3
LARGE_ROWS = 2**16 + 1  # rows of a large dataset's checkpoint: ids past what 16-bit (signed or not) integers hold
# the inputs of each learner call a property watches (None: not the caller's data, e.g. the mesh or a path)
INPUTS = {
    "initial": (None, "data", None),
    "next_batch": ("state", "data", None, None),
    "transition": ("state", "data", None, None, None),
    "contract": ("data", "config"),
    "save": (None, "state", "contract"),
    "restore": (None, "contract", None),
}


def called(ctx, name: str, *args, via=None):
    """`ctx.impl.<name>(*args)` (or `via(*args)`, a probe that calls it); a Miss if the call changed any input it
    was given (values, types, placement)."""
    watched = [(label, arg) for label, arg in zip(INPUTS[name], args) if label]
    before = [fingerprint(arg) for _, arg in watched]
    result = (via or getattr(ctx.impl, name))(*args)
    changed = changed_inputs(before, [fingerprint(arg) for _, arg in watched], [label for label, _ in watched])
    need(
        not changed,
        "every input as the caller passed it",
        changed,
        f"{name} changed its caller's inputs: {'; '.join(changed)} -> never assign into an argument, replace "
        "its arrays or change their flags (a new dict for a new state; fetch to the host into your own variables; "
        "copy an array before freezing it)" + (formulas.mark(INTACT_RULES[name]) if name in INTACT_RULES else ""),
    )
    return result


# the rule a call breaks by changing what its caller passed (the functions whose rules say so)
INTACT_RULES = {
    "next_batch": "new-state",
    "transition": "input-intact",
    "save": "save-inputs-intact",
    "restore": "restore-inputs-intact",
}


def new_result_each_call(ctx, name: str, *args, rule: str) -> None:
    """Fail unless two calls of the learner's `name` with `args` give two objects: the first result, edited by its
    caller (an entry added), must not be the second (a result kept between calls and handed out again)."""
    seen = probe(  # where the function runs: across the wire results are copies
        "edited_between_calls", getattr(ctx.impl, name), *args
    )
    expect(
        not (seen["same_object"] or seen["edit_seen"]),
        f"a new result at every call of {name}",
        "the same object as the call before" if seen["same_object"] else "a result holding the caller's edit",
        f"{name} handed out again the object an earlier call returned (kept between calls, a cache of results), so "
        f"an entry its caller added to the first result is in the second: a caller that edits one {name} result "
        f"changes every later one -> return a new dict from every call (a cache, if any, of immutable parts, "
        f"copied out: dict(kept))" + formulas.mark(rule, cause="result-handed-out-again"),
    )


def mesh_of(ctx, devices: int, layout: str = "first"):
    """A mesh of `devices` of the four logical devices, chosen and ordered by `layout` (one per pair, reused).

    Only "first" is a prefix of jax.devices(); on the others a function that places on a mesh of its own making
    (jax.devices()[:k], or the devices sorted) instead of the mesh it is given is told apart."""
    key = ("mesh", devices, layout)
    if key not in ctx.cache:
        if layout == "first":
            ctx.cache[key] = make_mesh(devices)
        else:
            every = jax.devices()
            ctx.cache[key] = Mesh(np.array([every[i] for i in mesh_positions(layout, devices)]), (AXIS,))
    return ctx.cache[key]


def other_mesh_of(ctx, devices: int, layout: str = "first"):
    """A mesh of `devices` devices that is neither a prefix of jax.devices() nor the case's own (`layout`): restore
    places on the mesh it is given, whichever devices it holds, not on the mesh the state was trained on."""
    return mesh_of(ctx, devices, "interleaved" if layout == "reversed" else "reversed")


def _step_key(case: Case, compiled: bool) -> tuple:
    return ("search step", case.devices, case.layout, case.learning_rate, case.decay, case.numbers, compiled)


def step_of(ctx, case: Case, compiled: bool = True):
    """The learner's step for the case's mesh, learning rate and decay, jitted or not (built once per run)."""
    key = _step_key(case, compiled)
    if key not in ctx.cache:
        mesh = mesh_of(ctx, case.devices, case.layout)
        ctx.cache[key] = ctx.impl.make_step(mesh, **hyperparameters(case), compiled=compiled)  # in the case's types
    return ctx.cache[key]


def foreign_step(ctx, case: Case) -> str | None:
    """Why arrays on different devices met, when the step is at fault: the step make_step gave for the case's
    mesh, called by the checker on inputs the checker placed on that mesh (one zero row per device), raises
    the same error, so the step runs on other devices than the mesh it was made for. None when it does not (the
    arrays a learner's function placed are then at fault). Asked only after such a failure."""
    rows, width = case.devices, case.shape()[1]
    mesh = mesh_of(ctx, case.devices, case.layout)
    inputs = (np.zeros((rows, width), np.float32), np.zeros(rows, np.float32), np.ones(rows, np.float32))
    for compiled in (True, False):
        key = _step_key(case, compiled)
        if key not in ctx.cache:
            continue
        try:
            ctx.cache[key](*placed(mesh, *inputs, np.zeros(width), np.zeros(width)))
        except (Miss, NotImplementedError):
            raise
        except Exception as exc:
            if "incompatible devices" in str(exc) or "different devices" in str(exc):
                positions = list(mesh_positions(case.layout, case.devices))
                return (
                    f"make_step(mesh) for a mesh of jax.devices() {positions} gave a step that runs on other "
                    "devices: called on inputs placed on that very mesh, it raised that its computation and its "
                    "arguments are on different devices. The step belongs to another mesh: one kept from an earlier "
                    "make_step call for a mesh of the same shape (a cache keyed by mesh.shape, mesh.size or the "
                    "device count: two meshes of one shape can hold other devices) -> build the step for the mesh "
                    "each call is given, or key a cache on the mesh itself" + formulas.mark("any-mesh")
                )
    return None


def _placement(value, mesh, spec, what: str, rule: str | None = None) -> None:
    wrong = sharding_of(value, mesh, spec)
    need(
        wrong is None,
        f"NamedSharding(mesh, {spec}) over {mesh.size} device(s)",
        wrong,
        f"{what} is not placed as {spec}"
        + (f": {wrong}" if "the mesh given" in (wrong or "") else "")
        + (formulas.mark(rule) if rule else "")
        + known_causes.placement(wrong),
    )


def off_mesh(values: dict, mesh) -> dict:
    """Name -> where it is instead, for those of `values` not replicated on `mesh` (NamedSharding(mesh, P())): empty
    when all are."""
    found = {name: sharding_of(value, mesh, P()) for name, value in values.items()}
    return {name: wrong for name, wrong in found.items() if wrong}


def misplaced_by(step, batch, state: dict, mesh) -> dict:
    """Which of the step's own new weights and momentum, on `batch` and `state`, are not replicated on `mesh`
    (name -> where they are instead): empty when the step keeps them there, so a state found off the mesh after a
    transition was moved by the transition, not by the step."""
    outputs = step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])
    return off_mesh(dict(zip(("weights", "momentum"), outputs)), mesh)


def _batch_rules(case: Case, data, batch, mesh) -> None:
    """Padding length, mask by position, valid rows per device, the selected rows (stage 1's probe), placement."""
    check_padding(batch, data, case.batch, case.devices)
    for name, spec in BATCH_SPECS.items():
        _placement(getattr(batch, name), mesh, spec, f"batch.{name}", "placed-batch")


def _initial_rules(case: Case, state: dict, mesh) -> None:
    rows, width = case.shape()
    need(set(FIELDS) <= set(state), list(FIELDS), sorted(state), "the state is the six fields")
    first = oracle.idiom_epochs(case.seed, rows, 1)[0]
    for name in ("weights", "momentum"):
        value = host(state[name])
        need(
            value.shape == (width,) and value.dtype == np.float32 and not value.any(),
            f"float32 zeros ({width},)",
            f"{value.dtype}{value.shape}",
            f"initial {known_causes.zeros_of(name, value, width)}",
        )
        _placement(state[name], mesh, P(), f"initial {name}", "replicated")
    need(
        np.array_equal(host(state["key"]), first["key"]),
        first["key"],
        host(state["key"]),
        "the saved key is the first half of split(PRNGKey(seed))",
    )
    need(
        np.array_equal(host(state["order"]), first["order"]),
        first["order"],
        host(state["order"]),
        "the first order is permutation(subkey, rows) with the second half of the split",
    )
    need(
        [int(state["cursor"]), int(state["step"])] == [0, 0],
        [0, 0],
        [int(state["cursor"]), int(state["step"])],
        "a new run starts at cursor 0, step 0",
    )


def initial_checked(ctx, case: Case, data, mesh, later: str, note: str = "") -> dict:
    """initial's state for the case, judged against the oracle before `later` uses it: a later function is never
    blamed for a state initial got wrong (a state of other data or another mesh, kept from an earlier call)."""
    state = called(ctx, "initial", case.seed, given(case, data), mesh)
    try:
        _initial_rules(case, state, mesh)
    except Miss as miss:
        rows, width = case.shape()
        shapes = {name: tuple(np.shape(host(state[name]))) for name in ("weights", "order") if name in state}
        other = shapes and shapes != {"weights": (width,), "order": (rows,)}
        raise Miss(
            miss.expected,
            miss.observed,
            f"the state initial returned{note} is already wrong, before {later} ran: {miss.why}"
            + (
                f" (shapes {shapes} for data of {rows} row(s) x {width} feature(s): a state made for other data, "
                "one kept from an earlier call?)"
                if other
                else ""
            )
            + (_folded_seed(case, state) or ("" if " -> " in miss.why else f" -> {REBUILT}"))
            + formulas.mark("initial-fields"),
        ) from None
    return state


REBUILT = "initial builds the state from the seed, data and mesh of each call"


def _folded_seed(case: Case, state: dict) -> str | None:
    """The cause when initial's key is the course's key of the seed cut to 31 bits or read as a signed int32 (a
    seed of 2^31 or more only): the seed was narrowed before PRNGKey, not a state kept from an earlier call."""
    if case.seed < 2**31 or "key" not in state:
        return None
    narrowed = {
        f"seed mod 2^31 = {case.seed % 2**31} (the seed kept in int32's positive range)": case.seed % 2**31,
        f"the seed read as a signed int32, {case.seed - 2**32}": case.seed - 2**32,
    }
    for what, seed in narrowed.items():
        try:
            key = oracle.idiom_epochs(seed, case.shape()[0], 1)[0]["key"]
        except (OverflowError, ValueError, TypeError):
            continue
        if np.array_equal(host(state["key"]), key):
            return (
                f"; the saved key is the course's key of {what}, not of seed {case.seed}: the seed was narrowed "
                "before PRNGKey, so seeds 2^31 apart start the same run -> pass the seed to PRNGKey whole (every "
                "seed in 0..2^32-1 is its own run)" + formulas.mark("split-then-permute")
            )
    return None


def _skipped(plan: list, call: int, ids, order, rows: int, batch: int) -> str | None:
    """If call `call` started the next epoch (its ids or its order) while ids of this epoch were unread, say so."""
    want = plan[call]
    following = next((p for p in plan[call + 1 :] if p["new_epoch"]), None)
    if want["new_epoch"] or following is None:
        return None
    started = len(ids) and np.array_equal(ids, following["ids"][: len(ids)])
    if not (started or np.array_equal(np.asarray(order), following["after"]["order"])):
        return None
    left = rows - want["after"]["cursor"] + len(want["ids"])
    return (
        f"call {call + 1}: a new epoch started although {left} id(s) of this epoch were unread -> the last batch "
        f"of an epoch keeps the remainder ({rows} rows in batches of {batch} give "
        f"{oracle.epoch_batches(rows, batch)}); "
        "skipping it drops those rows from the epoch"
    )


def _kinds(state: dict) -> dict:
    """Field -> where it lives: 'a jax.Array' (on devices) or 'host' (NumPy, a Python number)."""
    return {name: "a jax.Array" if isinstance(value, jax.Array) else "host" for name, value in state.items()}


def _kinds_kept(first: dict, state: dict, call: int) -> None:
    """A field initial kept on the host stays there after every call (a reshuffle included)."""
    now = _kinds(state)
    moved = {name: f"host -> {now.get(name)}" for name in first if first[name] == "host" and now.get(name) != "host"}
    need(
        not moved,
        first,
        now,
        f"call {call + 1}: next_batch moved field(s) {moved} -> a field initial kept on the host stays there (the "
        "sampler's key and order stay host NumPy after a reshuffle: np.asarray the new key and order)",
    )


OTHER_ROWS = 23  # the row count of the data of another shape a walk's second initial is given


def _dtype_of(value) -> np.dtype:
    return value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype


def misformed_fields(state: dict, rows: int, width: int) -> dict:
    """Field -> its form (dtype and shape) where it is not the form rule:initial-fields gives every state's field:
    weights and momentum float32 (d,), the legacy uint32 (2,) key, integer ids (n,), cursor and step 0-d integers
    (a Python int, a NumPy integer or a 0-d integer array; never a bool or a float)."""
    wanted = {
        "weights": lambda dtype, shape: dtype == np.float32 and shape == (width,),
        "momentum": lambda dtype, shape: dtype == np.float32 and shape == (width,),
        "key": lambda dtype, shape: dtype == np.uint32 and shape == (2,),
        "order": lambda dtype, shape: dtype.kind in "iu" and shape == (rows,),
        "cursor": lambda dtype, shape: dtype.kind in "iu" and shape == (),
        "step": lambda dtype, shape: dtype.kind in "iu" and shape == (),
    }
    found = {}
    for name, fits in wanted.items():
        if name in state:
            dtype, shape = _dtype_of(state[name]), tuple(np.shape(state[name]))
            if not fits(dtype, shape):
                found[name] = f"{type(state[name]).__name__} {dtype}{shape}"
    return found


FIELD_FORMS = (
    "weights and momentum float32 (d,), the legacy uint32 (2,) key, integer ids (n,), cursor and step 0-d integers"
)


def _forms_kept(state: dict, rows: int, width: int, what: str) -> None:
    """A Miss unless every field of `state` has the form the rule gives a state's fields (`misformed_fields`)."""
    wrong = misformed_fields(state, rows, width)
    need(
        not wrong,
        FIELD_FORMS,
        wrong,
        f"{what} returned a state with "
        + ", ".join(f"{name} a {form}" for name, form in wrong.items())
        + ", not the form every state's fields take -> every state, "
        f"not only initial's, holds {FIELD_FORMS} (a new epoch's key and order included: np.asarray(key, np.uint32))"
        + formulas.mark("initial-fields", "new-state"),
    )


def other_rows(rows: int) -> int:
    """The row count of a walk's second `initial`: the teaching fixture's 23, which the enumerated checks compile
    the course's permutation for, or 1 when the case has 23 (a one-element permutation has no sort to compile)."""
    return OTHER_ROWS if rows != OTHER_ROWS else 1


def sampler_walk(ctx, case: Case) -> None:
    """initial + next_batch across several epoch boundaries: every id, field, mask and placement."""
    data, mesh, rows = data_for(case), mesh_of(ctx, case.devices, case.layout), case.shape()[0]
    state = initial_checked(ctx, case, data, mesh, "next_batch")
    # the same seed with data of another shape, in the same process: the state follows the data of each call.
    # Another row count and width (other_rows): a permutation compiled for one row count serves every case, where
    # rows + 1 compiled a second program per case
    other = replace(case, fixture="", rows=other_rows(rows), features=case.shape()[1] + 1)
    other_state = initial_checked(
        ctx, other, data_for(other), mesh, "next_batch", " for the same seed and data of another shape"
    )
    plan = oracle.walk(rows, case.seed, case.batch, walk_calls(case))
    states, observed, first_kinds = [snapshot(state)], [], _kinds(state)
    first = state
    for call, want in enumerate(plan):
        new, batch = called(ctx, "next_batch", state, given(case, data), case.batch, mesh)
        need(
            snapshot(state).keys() == states[-1].keys()
            and all(np.array_equal(v, states[-1][k]) for k, v in snapshot(state).items()),
            "the input state unchanged",
            "changed",
            f"call {call + 1}: next_batch changed the caller's state" + formulas.mark("new-state"),
        )
        observed.append(np.asarray(batch.ids).astype(np.int64))
        states.append(snapshot(new))
        if not np.array_equal(observed[-1], want["ids"]):
            cause = _skipped(plan, call, observed[-1], states[-1]["order"], rows, case.batch) or recipe.length_cause(
                rows, case.batch, observed, plan
            )
            cause = cause or recipe.state_cause(states, observed, plan[: len(observed)], case.batch)
            raise Miss(want["ids"], observed[-1], cause or f"call {call + 1}: the ids leave the recipe")
        _batch_rules(case, data, batch, mesh)
        if not recipe.follows(states[-1], want):
            cause = _skipped(plan, call, observed[-1], states[-1]["order"], rows, case.batch)
            cause = cause or recipe.state_cause(states, observed, plan[: len(observed)], case.batch)
            raise Miss(
                want["after"],
                {k: states[-1].get(k) for k in ("cursor", "key", "order")},
                cause or f"call {call + 1}: the sampler fields leave coverage arithmetic",
            )
        need(int(new["step"]) == 0, 0, int(new["step"]), "next_batch leaves step alone" + formulas.mark("new-state"))
        _kinds_kept(first_kinds, new, call)
        _forms_kept(new, rows, case.shape()[1], f"call {call + 1}: next_batch")
        state = new
    _rows_read_again(ctx, case, data, mesh, first, plan[1]["ids"])
    _placed_on_the_mesh_given(ctx, case, data, first, mesh)
    _other_shape_reshuffles(ctx, other, mesh, other_state, rows)


def _rows_read_again(ctx, case: Case, data: Dataset, mesh, state: dict, next_ids) -> None:
    """A Miss when next_batch, given the same array objects again, returns the rows they held at an earlier call:
    one row the second batch holds has its features and target raised by one in place between two calls (both
    made where next_batch runs, so they see one pair of objects); the second batch's rows must be the changed
    data's rows at its ids. A sampler that keeps a host copy of the data by the arrays' id() serves the old rows."""
    row = int(np.random.default_rng([case.seed, 13]).choice(np.asarray(next_ids)))
    # where next_batch runs: across the wire every call's arrays are new objects there
    seen = probe("next_batch_changed_in_place", ctx.impl.next_batch, state, given(case, data), case.batch, mesh, row)
    features, targets = data.features.copy(), data.targets.copy()
    features[row] += np.float32(1)
    targets[row] += np.float32(1)
    ids = np.asarray(seen["ids"]).astype(np.int64)
    got = np.asarray(seen["features"])[: len(ids)], np.asarray(seen["targets"])[: len(ids)]
    need(
        ids.size
        and ids.max() < len(targets)
        and ids.min() >= 0
        and np.array_equal(got[0], features[ids])
        and np.array_equal(got[1], targets[ids]),
        f"the rows of ids {ids.tolist()} as the data holds them at the call (row {row}: features and target + 1)",
        "the rows those arrays held at an earlier call",
        f"row {row}'s features and target were raised by one in place, in the arrays given to an earlier "
        "next_batch call, and the next call on those same arrays returned rows other than the data's at that "
        "call: the data is kept between calls by the arrays' identity (a host copy cached by id() or by the "
        "object), not read again -> read the rows from the data at every call; an id is reused and an array's "
        "values change under it" + formulas.mark("pad-by-position"),
    )


def _placed_on_the_mesh_given(ctx, case: Case, data: Dataset, state: dict, mesh) -> None:
    """A Miss unless next_batch places its batch on the mesh it is given when the state's weights and momentum live on
    another mesh of as many devices (the state initial made for the case's mesh): where the batch goes is the mesh
    argument's to say, never the state's arrays'. One call, on the case's first state."""
    own = mesh_positions(case.layout, case.devices)
    layout = next(k for k in ("reversed", "interleaved", "first") if mesh_positions(k, case.devices) != own)
    other = mesh_of(ctx, case.devices, layout)
    _, batch = called(ctx, "next_batch", state, given(case, data), case.batch, other)
    devices = [d.id for d in other.devices.flat]
    for name, spec in BATCH_SPECS.items():
        wrong = sharding_of(getattr(batch, name), other, spec)
        if wrong is None:
            continue
        states = sharding_of(getattr(batch, name), mesh, spec) is None  # placed exactly where the state lives
        raise Miss(
            f"batch.{name}: NamedSharding(mesh, {spec}) on the mesh of devices {devices}, the one given",
            wrong,
            f"next_batch was given the mesh of devices {devices} and a state whose weights and momentum live on "
            f"the mesh of devices {[d.id for d in mesh.devices.flat]}, and batch.{name} is not placed on the mesh "
            f"given: {wrong.split(' -> ')[0]} -> "
            + (
                "it is placed as the state's mesh places it: place the batch on the mesh next_batch is given, "
                "whatever devices the state's arrays live on (a mesh read off state['weights'].sharding is the "
                "state's, not the call's)" + formulas.mark("placed-batch", cause="batch-on-the-states-mesh")
                if states
                else "place the batch on the mesh next_batch is given (its devices in its order)"
                + formulas.mark("placed-batch")
                + known_causes.placement(wrong)
            ),
        )


def _other_shape_reshuffles(ctx, other: Case, mesh, state: dict, rows: int) -> None:
    """A Miss unless the same seed's run on data of another row count, walked after the case's own run reshuffled
    from the same saved key, starts its second epoch with the recipe's order for its own row count: one batch of
    every row per epoch, two calls. A reshuffle kept between calls under the key alone (the key after a split
    depends on the seed only) hands this run the order drawn for the case's rows."""
    count, data = other.shape()[0], given(other, data_for(other))
    want = oracle.idiom_epochs(other.seed, count, 2)[1]["order"]
    state, _ = called(ctx, "next_batch", state, data, count, mesh)
    _, batch = called(ctx, "next_batch", state, data, count, mesh)
    ids = np.asarray(batch.ids).astype(np.int64)
    need(
        np.array_equal(ids, want),
        f"epoch 1 of seed {other.seed} on {count} row(s): the recipe's order {want.tolist()}",
        ids.tolist(),
        f"after a run of seed {other.seed} on {rows} row(s) crossed its epoch boundaries, a run of the same seed on "
        f"data of {count} row(s), in the same process, started its second epoch with "
        + (f"{ids.size} id(s), not its {count}" if ids.size != count else "another order than the recipe's")
        + ": the new epoch's order was kept from the earlier run (a reshuffle cached under the saved key, which "
        "is the same for every run of one seed) -> draw every epoch's order from the key and the row count of "
        "the data of that call (a cache, if any, keyed by both)" + formulas.mark("reshuffle", "remainder"),
    )


def _update_cause(before: dict, got: dict, want: dict, case: Case) -> str:
    """Which update the outputs follow (every known mistake that fits, most likely first), against the learning
    rate and decay the step was built with, on the right gradient `want['grad']`."""
    which = formulas.explain_update(before, want["grad"], got, case.learning_rate, case.decay, case.devices)
    return (
        f"the new momentum and weights: {which}; the step was built with "
        f"learning_rate={case.learning_rate:.6g}, decay={case.decay:.6g} ({numbers_words(case)}) -> v <- decay*v + g, "
        "w <- w - learning_rate*v with the values make_step was given, whatever number type Config accepts they come "
        "in (float(value) reads a Python int or float, a NumPy scalar or a 0-d array exactly: no type test)"
        + formulas.mark("momentum")
    )


FILLS = {"NaN padding": np.nan, "+inf padding": np.inf, "-inf padding": -np.inf, "huge padding": 3e38}
FILL_WORDS = {"NaN padding": "NaN", "+inf padding": "+inf", "-inf padding": "-inf", "huge padding": "3e38"}
ROUNDING = 32 * 2.0**-24  # float32 rounding bound per operation chain (the unit roundoff, with headroom)


def _large_data(case: Case, rng, width: int) -> tuple[Dataset, np.ndarray]:
    """(data, weights before the step): features of magnitude ~1e5, targets within ~10 of the prediction."""
    rows = case.shape()[0]
    features = (rng.normal(size=(rows, width)) * 1e5 / np.sqrt(width)).astype(np.float32)
    weights = rng.normal(size=width).astype(np.float32)
    targets = features.astype(np.float64) @ weights + 10 * rng.normal(size=rows)
    return Dataset(features, targets.astype(np.float32)), weights


def exact_data(rng, rows: int, width: int, largest: int) -> tuple[Dataset, np.ndarray]:
    """(data, weights before the step): integer features up to `largest` and weights up to 3, targets off by
    integers up to 8, so every product and sum of the course's formula is exact in float32 at these sizes (below
    2^24) and only the division by the count rounds."""
    features = rng.integers(-largest, largest + 1, size=(rows, width)).astype(np.float32)
    weights = rng.integers(-3, 4, size=width).astype(np.float32)
    targets = features.astype(np.float64) @ weights + rng.integers(-8, 9, size=rows)
    return Dataset(features, targets.astype(np.float32)), weights


def rounding_bounds(features, targets, mask, weights, momentum, learning_rate: float, decay: float) -> dict:
    """How far a float32 step may be from the float64 oracle through rounding alone, output by output.

    Each residual carries an error of the order of the unit roundoff times |x||w| + |y|; the loss and
    gradient sum those over the valid rows. A form that loses more (a loss expanded as a sum of squares of
    large numbers) is outside these bounds.
    """
    x, y = np.asarray(features, np.float64), np.asarray(targets, np.float64)
    valid = np.asarray(mask) > 0
    x, y, w = x[valid], y[valid], np.asarray(weights, np.float64)
    n = max(int(valid.sum()), 1)
    size = np.abs(x) @ np.abs(w) + np.abs(y)
    residual = np.abs(x @ w - y)
    loss = ROUNDING * float(np.sum(residual * size)) / n
    grad = ROUNDING * 2 * (np.abs(x).T @ (size + residual)) / n
    v = grad + ROUNDING * np.abs(decay * np.asarray(momentum, np.float64)) + ROUNDING * 2 * np.abs(x).T @ residual / n
    return {"loss": loss, "grad": grad, "momentum": v, "weights": learning_rate * v + ROUNDING * np.abs(w)}


def within(observed, expected, bound) -> bool:
    """`near`, or within the rounding `bound` of the oracle (large data)."""
    if near(observed, expected):
        return True
    observed, expected = np.asarray(observed, np.float64), np.asarray(expected, np.float64)
    return (
        observed.shape == expected.shape
        and oracle.finite(observed)
        and bool(np.all(np.abs(observed - expected) <= np.asarray(bound) + TOLERANCE["atol"]))
    )


def _step_inputs(case: Case):
    """(host batch the step is given, the same batch with finite padding for the oracle, state before)."""
    rng = np.random.default_rng(case.seed)
    data, width = data_for(case), case.shape()[1]
    ids = rng.permutation(case.shape()[0])[: case.rows]
    before = {
        "weights": rng.normal(size=width).astype(np.float32),
        "momentum": (0.5 * rng.normal(size=width)).astype(np.float32),
    }
    if case.contents == "large data":
        data, before["weights"] = _large_data(case, rng, width)
    if case.contents == "exact data":
        data, before["weights"] = exact_data(rng, case.shape()[0], width, 4096)
    finite = batch_arrays(data, ids, case.devices)
    if case.contents == "mask with gaps":  # padded slots between valid ones (one more per device, so some exist)
        extra = [np.zeros((case.devices, *a.shape[1:]), a.dtype) for a in finite]
        order = rng.permutation(len(finite[0]) + case.devices)
        finite = tuple(np.concatenate([a, e])[order] for a, e in zip(finite, extra))
    if case.contents not in FILLS:
        return finite, finite, before
    # one more padded slot on every device (so one device's worth of padding exists even on one device); the
    # oracle sees those slots as zeros, the step as the case's contents
    for_oracle = [np.concatenate([a, np.zeros((case.devices, *a.shape[1:]), a.dtype)]) for a in finite]
    given = [a.copy() for a in for_oracle]
    slots = len(ids)
    # targets take the case's value; features the largest finite float32 (a gradient taken by jax.grad of a
    # selected loss multiplies each padded feature by a zero cotangent, which is exact for finite features)
    given[0][slots:], given[1][slots:] = np.float32(3e38), np.float32(FILLS[case.contents])
    given[2][slots:] = 0.0
    return tuple(given), tuple(for_oracle), before


def host_outputs(outputs) -> dict:
    """A step's (weights, momentum, loss, grad) on the host, by name: arrays, and the loss a float."""
    weights, momentum, loss, grad = outputs
    return {
        "weights": np.asarray(weights),
        "momentum": np.asarray(momentum),
        "loss": float(loss),
        "grad": np.asarray(grad),
    }


def step_update(ctx, case: Case) -> None:
    """One step (jitted or not) on `rows` valid rows over `devices` devices, with the case's learning rate and
    decay, on the course's data, on padding that holds NaN, +-inf or huge values, on large data, on exact data or
    with padded slots between valid ones (a mask with gaps)."""
    mesh = mesh_of(ctx, case.devices, case.layout)
    batch, finite, before = _step_inputs(case)
    step = step_of(ctx, case, case.compiled)
    args = placed(mesh, *batch, before["weights"], before["momentum"])
    weights, momentum, loss, grad = step(*args)
    w, v, want_loss, want_grad = oracle.momentum_step(
        *finite, before["weights"], before["momentum"], case.learning_rate, case.decay
    )
    bound = rounding_bounds(*finite, before["weights"], before["momentum"], case.learning_rate, case.decay)
    if case.contents == "exact data":  # no rounding to allow for beyond the course's tolerance
        bound = {name: 0.0 for name in bound}
    which = "" if case.compiled else "the un-jitted step (compiled=False): "
    _output_shapes(case, {"weights": weights, "momentum": momentum, "loss": loss, "grad": grad}, which)
    got = host_outputs((weights, momentum, loss, grad))
    if case.contents in FILLS and not all(oracle.finite(got[k]) for k in got):
        raise Miss(
            {"weights": w, "momentum": v, "loss": want_loss, "grad": want_grad},
            got,
            f"{which}padded slots (mask 0) with target {FILL_WORDS[case.contents]} and features 3e38 made the outputs "
            "non-finite -> a padded "
            "slot has validity zero whatever its contents: select it out (jnp.where(mask > 0, residual, 0)), "
            "never multiply by the mask (0 x NaN is NaN, 0 x inf is NaN)" + formulas.mark("global-mean"),
        )
    if case.contents == "large data" and not within(got["loss"], want_loss, bound["loss"]):
        raise Miss(
            want_loss,
            got["loss"],
            f"{which}loss on large data (features ~1e5, targets within ~10 of the prediction): off by "
            f"{abs(got['loss'] - want_loss):.3g}, float32 rounding allows {bound['loss']:.3g} -> compute each "
            "residual x.w - y first and square it; a loss expanded as sum(p^2) - 2 sum(p y) + sum(y^2) cancels "
            "numbers of 1e10 and loses every digit" + formulas.mark("global-mean"),
        )
    if case.contents == "exact data" and not within(got["grad"], want_grad, bound["grad"]):
        raise Miss(
            want_grad,
            got["grad"],
            f"{which}gradient on exact data (integer features up to 4096, integer weights and targets, where the "
            f"course's formula rounds nothing but the division by the count): off by "
            f"{float(np.max(np.abs(np.asarray(got['grad'], np.float64) - want_grad))):.3g} -> compute each residual "
            "x.w - y first, then sum x * residual; a form that builds X^T X (normal equations, a Gram matrix) adds "
            "numbers near 1e9 that float32 cannot hold exactly" + formulas.mark("global-mean"),
        )
    _gaps(case, got, (want_loss, want_grad), bound, finite[2], which)
    if not within(got["grad"], want_grad, bound["grad"]):
        why = formulas.momentum_as_gradient(
            got["grad"], got["momentum"], want_grad, before["momentum"]
        ) or formulas.explain_gradient(got["grad"], *finite, before["weights"], case.devices)
        raise Miss(want_grad, got["grad"], f"{which}gradient: {why or 'no known formula matches'}")
    if not within(got["loss"], want_loss, bound["loss"]):
        why = formulas.explain_loss(got["loss"], *finite, before["weights"], case.devices, new_weights=got["weights"])
        raise Miss(want_loss, got["loss"], f"{which}loss: {why or 'no known formula matches'}")
    if not (within(got["weights"], w, bound["weights"]) and within(got["momentum"], v, bound["momentum"])):
        raise Miss(
            {"weights": w, "momentum": v},
            {k: got[k] for k in ("weights", "momentum")},
            which + _update_cause(before, got, {"grad": want_grad}, case),
        )
    for name, value in (("weights", weights), ("momentum", momentum)):
        _placement(value, mesh, P(), f"{which}the step's new {name}")
    _neighbour_steps(ctx, case, mesh, batch, which)
    _scaled_steps(case, step, mesh, finite, before["weights"])
    if case.compiled:  # one device included: the rule asks for a real collective on every mesh
        found = count_all_reduce(step.lower(*args).as_text())
        need(
            found >= 1,
            ">= 1 all_reduce",
            found,
            f"the compiled step made for a mesh of {case.devices} device(s) has no collective: its lowered program "
            "holds no all_reduce -> psum the sums over the data axis on every mesh, one device included (a psum "
            "over one device adds nothing, but the program is the same for every device count)"
            + formulas.mark("sharded-step")
            + known_causes.mark("not-sharded"),
        )
    _rows_split(step, args, case)


SCALES = (-12, 17)  # the rows scaled so that every feature and residual bound is at most 10^e, for each e here: a
# loss and gradient near 1e-24, then near 1e33, every value a normal float32 (no product near the smallest normal,
# 1.2e-38, which the CPU may flush to zero; no sum over 64 rows near the largest, 3.4e38)


def _scaled_steps(case: Case, step, mesh, finite: tuple, weights) -> None:
    """A Miss unless the compiled step on the case's rows scaled far down, then far up (SCALES), from zero
    momentum, gives the masked-mean loss and gradient and the new momentum within float32's rounding of NumPy's,
    relative to their own size: float32 holds a gradient of 1e-20 and a loss of 1e33, so a value dropped as noise,
    floored or capped at a fixed size is wrong, and an absolute tolerance would pass it. Two more runs of the same
    compiled program."""
    if not case.compiled:
        return  # the un-jitted step costs seconds per call; the jitted one is the same body
    x, y, mask = (np.asarray(a, np.float64) for a in finite)
    valid = mask > 0
    size = max(
        float(np.max(np.abs(x[valid]), initial=0)), float(np.max(np.abs(x[valid]) @ np.abs(weights) + np.abs(y[valid])))
    )
    for e in SCALES if size > 0 else ():
        factor = np.float32(10.0**e / size)
        features, targets = (np.asarray(a, np.float32) * factor for a in finite[:2])
        _scaled_step(case, step, mesh, (features, targets, finite[2]), weights, e)


def _scaled_step(case: Case, step, mesh, batch: tuple, weights, e: int) -> None:
    momentum = np.zeros_like(weights)
    outputs = step(*placed(mesh, *batch, weights, momentum))
    got = dict(zip(("weights", "momentum", "loss", "grad"), outputs))
    _, v, loss, grad = oracle.momentum_step(*batch, weights, momentum, case.learning_rate, case.decay)
    bound = rounding_bounds(*batch, weights, momentum, case.learning_rate, case.decay)
    want = {"loss": loss, "grad": grad, "momentum": v}
    wrong = {}
    for name, value in want.items():
        observed = np.asarray(got[name], np.float64)
        slack = bound[name] + TOLERANCE["rtol"] * np.abs(value)
        if observed.shape != np.shape(value) or not np.all(np.abs(observed - value) <= slack):
            wrong[name] = observed
    if not wrong:
        return
    first = next(iter(wrong))
    magnitude = float(np.max(np.abs(want[first])))
    if not np.any(wrong[first]) and magnitude > 0:
        how = "of exact zeros"
    elif np.all(np.abs(wrong[first]) < np.abs(want[first])):
        how = "smaller than NumPy's"
    elif np.all(np.abs(wrong[first]) > np.abs(want[first])):
        how = "larger than NumPy's"
    else:
        how = "off by more than float32 rounding of its own size"
    raise Miss(
        {name: want[name] for name in wrong},
        {name: value.tolist() for name, value in wrong.items()},
        f"the step on the same rows scaled {'down' if e < 0 else 'up'} (features and residuals at most 1e{e}; "
        f"the NumPy {first} is of size {magnitude:.3g}), from zero momentum, gave a {' and '.join(wrong)} {how}: "
        "every value of the formula scales with the data, and float32 holds a gradient of 1e-20 and a loss of 1e33 "
        "-> no threshold, floor, cap, epsilon or clip of a fixed absolute size in the step (a gradient below 1e-9 "
        "is no float noise when the data is small, nor a loss of 1e31 an overflow)"
        + formulas.mark("global-mean", "momentum"),
    )


NEAR = 2.0**-16  # relative: a learning rate or decay this close is another experiment
SMALL = 0.03  # the pair's base is at most this (halved from the case's value): 2^-16 of it is < 5e-7, so the two
# values agree to 6 decimal places, yet their steps' float32 results differ


def _neighbour_steps(ctx, case: Case, mesh, batch, which: str) -> None:
    """Two steps made with learning rates (then decays) 2^-16 apart (relative), at most 0.03, give other new
    weights or momentum on the same inputs: each make_step call keeps the values it was given (a step made for
    another call, such as one kept under a rounded key, gives back the first one's numbers). The inputs make the
    gradient exactly 0 (zero weights, zero targets) and the momentum 1, so the new momentum is the decay and the
    new weights -learning_rate * decay, each a float32 product whose factors differ by 2^-16. On the course's
    contents only (four more steps to build)."""
    features, targets, mask = batch
    width = features.shape[1]
    zeros, ones = np.zeros(width, np.float32), np.ones(width, np.float32)
    args = placed(mesh, features, np.zeros_like(targets), mask, zeros, ones)
    for name in ("learning_rate", "decay") if case.contents == "course" else ():
        base = getattr(case, name)
        while base > SMALL or base in (LEARNING_RATE, DECAY):  # never a default: a step that ignores the value
            base /= 2  # it was given is then told apart from one kept under a rounded key
        if base == 0:
            continue
        values = (float(np.float32(base)), float(np.float32(base) * np.float32(1 + NEAR)))
        built = [replace(case, **{name: value}) for value in values]
        if all(np.array_equal(a, b) for a, b in zip(*(_expected(b, width) for b in built))):
            continue  # the course's own float32 results agree (a decay of 0 zeroes every weight): nothing to tell
        got = []
        steps = [step_of(ctx, each, case.compiled) for each in built]  # both made before either first runs
        for step in steps:
            weights, momentum, _, _ = step(*args)
            got.append({"weights": np.asarray(weights, np.float64), "momentum": np.asarray(momentum, np.float64)})
        _made_later(built, got, name, which)
        _follows(built[0], got[0], which)  # a step ignoring the value it was given: named by its update
        need(
            not all(np.array_equal(got[0][f], got[1][f]) for f in ("weights", "momentum")),
            f"other new weights or momentum for {name} {values[1]:.9g} than for {values[0]:.9g}",
            "the same",
            f"{which}make_step({name}={values[1]:.9g}) gave a step whose new weights and momentum equal those of "
            f"make_step({name}={values[0]:.9g}) on the same inputs -> each call of make_step builds its step with "
            "the values it was given; a step kept from an earlier call (a cache keyed by rounded values) belongs to "
            "another experiment" + formulas.mark("momentum"),
        )
        _follows(built[1], got[1], which)


def _made_later(built: list, got: list, name: str, which: str) -> None:
    """A Miss when the step made first, run only after the second make_step call, gives the second's numbers
    (and not its own): the values reach the step through state shared by every make_step call."""
    width = got[0]["weights"].size
    theirs, own = _expected(built[1], width), _expected(built[0], width)
    fits = [
        all(np.array_equal(got[0][f], e) for f, e in zip(("momentum", "weights"), values)) for values in (theirs, own)
    ]
    need(
        not (fits[0] and not fits[1]),
        {"momentum": own[0], "weights": own[1]},
        {k: got[0][k] for k in ("momentum", "weights")},
        f"{which}the step of make_step({name}={getattr(built[0], name):.9g}), first run after "
        f"make_step({name}={getattr(built[1], name):.9g}) was called, used the later call's {name} -> the "
        "values reach the step through state every make_step call shares (a module-level variable read when the "
        "step is traced or run); keep each call's values in the step it returns (a closure)"
        + formulas.mark("momentum"),
    )


def _expected(built: Case, width: int) -> tuple:
    """(v, w) from zero weights, momentum 1 and a zero gradient: v = decay, w = -learning_rate * decay (float32)."""
    v = np.full(width, np.float32(built.decay), np.float64)
    w = -(np.float32(built.learning_rate) * np.float32(built.decay)) * np.ones(width)
    return v, w


def _follows(built: Case, got: dict, which: str) -> None:
    """A Miss unless the step gave `_expected`'s v and w for the values it was built with."""
    width = got["weights"].size
    v, w = _expected(built, width)
    if not all(np.allclose(got[f], e, rtol=2.0**-20, atol=0) for f, e in (("momentum", v), ("weights", w))):
        before = {"weights": np.zeros(width), "momentum": np.ones(width)}
        cause = _update_cause(before, got, {"grad": np.zeros(width)}, built)
        raise Miss({"weights": w, "momentum": v}, got, which + cause)


def _output_shapes(case: Case, outputs: dict, which: str) -> None:
    """A Miss unless new weights, momentum and gradient have the weights' shape (d,) and the loss is 0-d. Judged
    before any value: a value of the wrong shape is a shape mistake (a squeeze drops the axis of one feature),
    never a factor in the formula."""
    width = case.shape()[1]
    want = {"weights": (width,), "momentum": (width,), "grad": (width,), "loss": ()}
    shapes = {name: tuple(np.shape(value)) for name, value in outputs.items()}
    wrong = {name: shape for name, shape in shapes.items() if shape != want[name]}
    if wrong:
        raise Miss(
            {name: want[name] for name in wrong},
            wrong,
            f"{which}the step returned {', '.join(f'{n} of shape {s}' for n, s in wrong.items())} for {width} "
            f"feature(s): a shape mistake, not a wrong value -> the gradient, new weights and new momentum have the "
            f"weights' shape ({width},) and the loss is a 0-d scalar"
            + (
                " (a squeeze, or an index or sum over the feature axis, drops that axis when there is one feature)"
                if width == 1
                else ""
            ),
        )


def _gaps(case: Case, got: dict, want: tuple, bound: dict, mask, which: str) -> None:
    """A Miss when the mask has gaps (contents "mask with gaps") and the loss or gradient is not the masked mean."""
    loss, grad = want
    if case.contents == "mask with gaps" and not (
        within(got["grad"], grad, bound["grad"]) and within(got["loss"], loss, bound["loss"])
    ):
        raise Miss(
            {"loss": loss, "grad": grad, "mask": mask},
            {"loss": got["loss"], "grad": got["grad"]},
            f"{which}loss or gradient wrong when padded slots sit between valid ones (mask {mask.tolist()}) -> "
            "a row counts where its own mask is 1, wherever it sits: select each slot by mask > 0, never by its "
            "position or by a running product of the mask" + formulas.mark("global-mean"),
        )


def _rows_split(step, args, case: Case) -> None:
    """Data parallel on any mesh: the step traces to a shard_map whose body holds 1/devices of the batch's rows."""
    features = args[0]
    rows, width = features.shape
    shapes = probe("mapped_input_shapes", step, *args)
    need(
        shapes is not None,
        "a shard_map in the traced step",
        "no shard_map",
        f"the step on a {case.devices}-device mesh traces to no shard_map -> the same mapped body on every mesh, "
        "one device included (a plain jit on the whole batch is not the course's data-parallel step)",
    )
    shapes = [tuple(shape) for shape in shapes]
    if case.devices == 1:
        return  # one device holds every row: the split shows only on larger meshes
    local = (rows // case.devices, width)
    need(
        local in shapes and (rows, width) not in shapes,
        f"each device's body receives features of shape {local} (the rows split over {case.devices} devices)",
        f"the body's inputs have shapes {shapes}",
        f"the step's shard_map gives every device all {rows} rows: in_specs must split the batch over the data "
        "axis (P('data', None) for features, P('data') for targets and mask); replicated inputs compute the whole "
        "batch on every device, which is not data parallel",
    )


def transition_walk(ctx, case: Case) -> None:
    """transition with a step built for the case's learning rate and decay, across several epoch boundaries."""
    data, mesh, rows = walk_data(case), mesh_of(ctx, case.devices, case.layout), case.shape()[0]
    step = _made_after_another(ctx, case)  # the learning rate and decay in the case's number types
    state = initial_checked(ctx, case, data, mesh, "any transition")
    count = functools.partial(probe, "counted_transition", ctx.impl.transition)  # run where transition runs
    for call, want in enumerate(oracle.walk(rows, case.seed, case.batch, walk_calls(case))):
        before = {"weights": host(state["weights"]), "momentum": host(state["momentum"])}
        (new, loss, ids), calls, (traced, fetched, copied) = _transitioned(
            ctx, case, state, data, mesh, step, call, via=count
        )
        ids = np.asarray(ids).astype(np.int64)
        need(np.array_equal(ids, want["ids"]), want["ids"], ids, f"transition {call + 1}: the ids next_batch gives")
        need(int(new["step"]) == call + 1, call + 1, int(new["step"]), f"transition {call + 1}: step + 1 exactly once")
        fields = snapshot(new)
        need(
            recipe.follows(fields, want),
            want["after"],
            {k: fields.get(k) for k in ("cursor", "key", "order")},
            f"transition {call + 1}: the sampler fields",
        )
        batch = batch_arrays(data, ids, case.devices)
        w, v, want_loss, grad = oracle.momentum_step(
            *batch, before["weights"], before["momentum"], case.learning_rate, case.decay
        )
        got = {"weights": fields["weights"], "momentum": fields["momentum"], "loss": float(loss)}
        if not (near(got["weights"], w) and near(got["momentum"], v) and near(got["loss"], want_loss)):
            direct = step(*placed(mesh, *batch, before["weights"], before["momentum"]))
            updates = near(np.asarray(direct[0]), w) and near(np.asarray(direct[1]), v)
            step_loss = float(np.asarray(direct[2]))
            if updates and not near(step_loss, want_loss) and near(got["weights"], w) and near(got["momentum"], v):
                if near(got["loss"], step_loss):  # transition passed on what the step gave: the step's loss is wrong
                    why = formulas.explain_loss(
                        step_loss, *batch, before["weights"], case.devices, new_weights=np.asarray(direct[0])
                    )
                    raise Miss(
                        {"loss": want_loss},
                        {"loss": got["loss"], "the step's own loss": step_loss},
                        f"transition {call + 1}: its new weights and momentum are right and it passes on the loss "
                        "the step returns; the step it was given reports a wrong loss on this batch ("
                        + (why or "no known formula fits it")
                        + ") -> fix make_step's loss; transition is not at fault",
                    )
            own = updates and near(step_loss, want_loss)
            if not own:
                _typed_step_cause(ctx, case, mesh, batch, before, (w, v), got, call)
            wrong_batch = _batch_fault(ctx, case, state, data, mesh) if own else None
            if wrong_batch:  # next_batch's output is judged before transition is blamed for it
                raise Miss(
                    {"weights": w, "momentum": v, "loss": want_loss},
                    got,
                    f"transition {call + 1}: the step it was given is right on the course's batch, and the batch "
                    f"next_batch gives for this state is already wrong ({wrong_batch}) -> fix next_batch; transition "
                    "is not at fault" + formulas.mark("pad-by-position"),
                )
            lead = (
                "the step it was given is right on this batch, so transition does not use it"
                + formulas.mark("one-update")
                + ": "
                if own
                else "the step itself is wrong here: "
            )
            # A wrong gradient is named as such: momentum is judged on the gradient the step computed.
            blame = (
                None
                if own
                else formulas.update_cause(before, direct[3], grad, got, case.learning_rate, case.decay, case.devices)
            )
            if blame:
                formula = formulas.explain_gradient(np.asarray(direct[3]), *batch, before["weights"], case.devices)
                blame += f" ({formula})" if formula else ""
            raise Miss(
                {"weights": w, "momentum": v, "loss": want_loss},
                got,
                f"transition {call + 1}: {lead}{blame or _update_cause(before, got, {'grad': grad}, case)}",
            )
        _transition_placement(ctx, case, state, data, mesh, step, new, call)
        _forms_kept(new, rows, case.shape()[1], f"transition {call + 1}")
        need(
            calls == 1,
            "1 call of the step it was given",
            f"{calls} call(s)",
            f"transition {call + 1} called the step it was given {calls} time(s) -> one transition is one "
            "next_batch and one call of the step: take the loss and the new weights and momentum from that one "
            "call (every call compiles or runs the whole update again)"
            + (", the step it is given, never one it builds or keeps" if calls == 0 else "")
            + formulas.mark("one-update"),
        )
        need(
            not traced,
            "the step it was given called on the batch's arrays",
            f"{traced} call(s) on tracers",
            f"transition {call + 1} called the step it was given on tracers: it wrapped the step in a transformation "
            "of its own (jax.jit(step), vmap, grad) -> call the step it is given directly on the batch's arrays; it "
            "is compiled already, or eager on purpose (compiled=False), and a wrapper made at every transition traces "
            "it again each time and turns an eager step into a compiled one" + formulas.mark("one-update"),
        )
        need(
            not fetched,
            "the step it was given called on the batch's placed arrays",
            f"{fetched} call(s) given host arrays",
            f"transition {call + 1} called the step it was given on host copies of the batch (np.asarray, "
            "jax.device_get), not on the placed arrays next_batch returned -> pass batch.features, batch.targets "
            "and batch.mask as they are: they already lie on the mesh, split over the data axis, and a host copy is "
            "sent to the devices again at every step"
            + formulas.mark("one-update")
            + known_causes.mark("batch-fetched"),
        )
        need(
            calls != 1 or not copied,
            "the new state holds the arrays the step returned",
            f"other arrays for {copied}",
            f"transition {call + 1}: the new state's {copied} are not the arrays the step returned (the same values, "
            "placed anew) -> " + KEEP_STEP_OUTPUTS + formulas.mark("one-update") + known_causes.mark("outputs-copied"),
        )
        state = new


def other_values(case: Case) -> dict:
    """A learning rate and decay in the case's number types but of other values: the learning rate doubled and the
    decay halved (exact in every float width; an integer learning rate 2, an integer decay stays 0); a Python float
    where the type cannot hold the value exactly, as `hyperparameters` does."""
    found = {}
    for (name, value), kind, factor in zip(hyperparameters(case).items(), case.numbers.split(" / "), (2.0, 0.5)):
        moved = float(value) * factor
        number = moved if isinstance(value, float) else typed(moved, kind)
        found[name] = number if float(number) == moved else moved
    return found


def _made_after_another(ctx, case: Case):
    """The case's step (jitted), made by a make_step call that follows one for other values of the same number types
    (`other_values`, that step never run): each call builds for the values it is given, so a step kept from an
    earlier call under the numbers' types (or the mesh alone) is the other experiment's."""
    if _step_key(case, True) not in ctx.cache:
        ctx.impl.make_step(mesh_of(ctx, case.devices, case.layout), **other_values(case), compiled=True)
    return step_of(ctx, case)


def _typed_step_cause(ctx, case: Case, mesh, batch, before: dict, want: tuple, got: dict, call: int) -> None:
    """A Miss naming the numbers' types when the step make_step gave for the case's learning rate and decay, in the
    case's types, is wrong on this batch and the step make_step gives for the same values as Python floats is right
    (one more make_step call, asked only after a failure)."""
    if all(isinstance(value, float) for value in hyperparameters(case).values()):
        return
    floats = ctx.impl.make_step(mesh, float(case.learning_rate), float(case.decay))
    outputs = floats(*placed(mesh, *batch, before["weights"], before["momentum"]))
    if not (near(np.asarray(outputs[0]), want[0]) and near(np.asarray(outputs[1]), want[1])):
        return
    raise Miss(
        {"weights": want[0], "momentum": want[1]},
        {"weights": got["weights"], "momentum": got["momentum"]},
        f"transition {call + 1}: the step make_step gave for learning_rate={case.learning_rate:.6g}, "
        f"decay={case.decay:.6g} as {numbers_words(case)} is wrong on this batch, and the step it gives for the same "
        "values as Python floats is right: the step depends on the numbers' types (a type test, or a step kept from "
        "another call under their types or a key that equal values of other types share) -> build each step from "
        "the values that call is given, float(learning_rate) and float(decay), whatever number type they come in"
        + formulas.mark("momentum"),
    )


KEEP_STEP_OUTPUTS = (
    "keep the step's new weights and momentum as it returns them (no np.asarray, jax.device_get or device_put of "
    "them); only the loss and the ids go to the host"
)


def _transition_placement(ctx, case: Case, state: dict, data, mesh, step, new: dict, call: int) -> None:
    """transition's new weights and momentum replicated on the mesh; when they are not, the step it was given is
    called on the same batch and state: the function named is the one whose outputs left the mesh."""
    wrong = off_mesh({name: new[name] for name in ("weights", "momentum")}, mesh)
    if not wrong:
        return
    _, batch = called(ctx, "next_batch", state, given(case, data), case.batch, mesh)
    by_step = misplaced_by(step, batch, state, mesh)
    raise Miss(
        f"NamedSharding(mesh, P()) over {mesh.size} device(s)",
        wrong,
        f"transition {call + 1}: the new state's {sorted(wrong)} are not replicated on the mesh ("
        + "; ".join(f"{name}: {where}" for name, where in wrong.items())
        + (
            f"), and the step it was given returns them off the mesh too ({by_step}) -> fix make_step: its outputs "
            "stay on the mesh it was made for; transition is not at fault" + formulas.mark("momentum")
            if by_step
            else "); the step it was given returns them replicated on that mesh, so transition moved them -> "
            + KEEP_STEP_OUTPUTS
            + formulas.mark("one-update")
        ),
    )


def _transitioned(ctx, case: Case, state: dict, data, mesh, step, call: int, via=None):
    """The learner's transition of `state`; where it raises and the batch next_batch gives for `state` is already
    wrong, the Miss names next_batch: the step raised on a batch it should never have been given."""
    try:
        return called(ctx, "transition", state, given(case, data), case.batch, step, mesh, via=via)
    except (NotImplementedError, Miss):
        raise
    except Exception as exc:
        try:
            wrong_batch = _batch_fault(ctx, case, state, data, mesh)
        except Exception:
            wrong_batch = None
        if not wrong_batch:
            raise
        raise Miss(
            "transition's new state, loss and ids",
            wire.learner_error(exc),
            f"transition {call + 1} raised {type(exc).__name__} at {raised_where(exc)}, and the batch next_batch "
            f"gives for this state is already wrong ({wrong_batch}) -> fix next_batch first: the step raised on a "
            "batch it should never have been given" + formulas.mark("pad-by-position"),
        ) from exc


def _batch_fault(ctx, case: Case, state: dict, data, mesh) -> str | None:
    """What is wrong with the batch the learner's next_batch gives for `state` (padding, mask, rows), or None."""
    try:
        _, batch = called(ctx, "next_batch", state, given(case, data), case.batch, mesh)
        check_padding(batch, data, case.batch, case.devices)
    except CheckFailed as failed:
        return failed.diagnosis
    except Miss:
        return None
    return None


def _config(case: Case, **changes) -> Config:
    fields = {
        "seed": case.seed,
        "batch_size": case.batch,
        "learning_rate": case.learning_rate,
        "decay": case.decay,
        "num_devices": case.devices,
    }
    return Config(**{**fields, **changes})


def _ulp(data: Dataset, part: str, position: int) -> Dataset:
    features, targets = data.features.copy(), data.targets.copy()
    array = features if part == "features" else targets
    array.flat[position % array.size] = np.nextafter(array.flat[position % array.size], np.float32(np.inf))
    return Dataset(features, targets)


def _alike(x: float, y: float) -> bool:
    """Whether 8 decimal places or 8 significant digits (the precision NumPy prints an array with) show x, y alike."""
    return f"{x:.8f}" == f"{y:.8f}" or f"{x:.8g}" == f"{y:.8g}"


HIDDEN_SCAN = 64  # float32 values tried upwards from the first magnitude that hides an ulp (boundaries ~10 apart)


def _fixed_from(array: np.ndarray) -> float:
    """The smallest magnitude at which NumPy still prints `array` in fixed notation (at least 1e-4 and at least
    a thousandth of its largest magnitude; below either it prints exponents, which show an ulp), with a margin."""
    largest = float(np.max(np.abs(array[np.isfinite(array)]), initial=0.0))
    return 2 * max(1e-4, largest / 1000)


def _hidden_value(array: np.ndarray, sign: float) -> np.float32 | None:
    """A float32 of `sign` whose next float32 up prints alike at 8 decimal places, of a magnitude at which NumPy
    keeps printing `array` in fixed notation: found directly, in at most HIDDEN_SCAN steps (None if none)."""
    low = _fixed_from(array)
    if low > 2.0**-5:  # above 1/32 an ulp of float32 reaches 1e-8 and 8 decimal places show it
        return None
    value = np.float32(max(low, 2.0**-7) * sign)  # ulp 2^-30 ~ 9e-10: inside one 1e-8 printing step mostly
    for _ in range(HIDDEN_SCAN):
        up = np.nextafter(value, np.float32(np.inf))
        if _alike(float(value), float(up)):
            return value
        value = up
    return None


def _hidden_ulp(data: Dataset, part: str, start: int) -> tuple[Dataset, Dataset] | None:
    """Two datasets that differ in one element of `part` by one float32 ulp where 8 decimal places (or 8
    significant digits), the precision NumPy prints an array with, show both values alike: a contract built
    from printed numbers gives both the same value. The element is the first from `start` on whose own ulp is
    hidden (at a magnitude NumPy prints in fixed notation), and the first dataset is then `data` itself. When
    the data hold none (small data of magnitude ~1 rarely do), element `start` is first set to a value whose
    ulp is hidden (`_hidden_value`), so every case draws the edit. None only for data too large for fixed
    notation to hide any ulp."""
    array = data.features if part == "features" else data.targets
    flat = array.reshape(-1)
    if not flat.size:
        return None
    up, low = np.nextafter(flat, np.float32(np.inf)), _fixed_from(array)
    for index in np.roll(np.arange(flat.size), -(start % flat.size)):
        x, y = float(flat[index]), float(up[index])
        if np.isfinite(y) and min(abs(x), abs(y)) >= low and _alike(x, y):
            return data, _ulp(data, part, int(index))
    index = start % flat.size
    value = _hidden_value(array, -1.0 if flat[index] < 0 else 1.0)
    if value is None:
        return None
    features, targets = data.features.copy(), data.targets.copy()
    (features if part == "features" else targets).flat[index] = value
    moved = Dataset(features, targets)
    return moved, _ulp(moved, part, index)


def _swapped(data: Dataset) -> Dataset | None:
    """The data with its first two distinct rows swapped (a row permutation: another run); None if none differ."""
    features, targets = data.features.copy(), data.targets.copy()
    same = [np.array_equal(features[i], features[0]) and targets[i] == targets[0] for i in range(len(targets))]
    rows = [i for i in range(1, len(targets)) if not same[i]]
    if not rows:
        return None
    i = rows[0]
    features[[0, i]], targets[[0, i]] = features[[i, 0]], targets[[i, 0]]
    return Dataset(features, targets)


def _targets_swapped(data: Dataset) -> Dataset | None:
    """The data with two distinct targets swapped and every feature kept: rows paired with other targets."""
    targets = data.targets.copy()
    other = [i for i in range(1, len(targets)) if targets[i] != targets[0]]
    if not other:
        return None
    targets[[0, other[0]]] = targets[[other[0], 0]]
    return Dataset(data.features, targets)


def _reshaped(data: Dataset) -> Dataset | None:
    """The same bytes, features then targets, read as another number of rows and features (None if none fits).

    A contract that hashes the bytes without their shapes gives both the same digest."""
    rows, width = data.features.shape
    flat = np.concatenate([data.features.ravel(), data.targets.ravel()])
    for other_rows in range(1, flat.size + 1):
        if flat.size % other_rows or other_rows == rows:
            continue
        other_width = flat.size // other_rows - 1
        if other_width >= 1:
            cut = other_rows * other_width
            return Dataset(flat[:cut].reshape(other_rows, other_width).copy(), flat[cut:].copy())
    return None


def _middle_edited(data: Dataset) -> Dataset:
    targets = data.targets.copy()
    targets[len(targets) // 2] += np.float32(1)
    return Dataset(data.features, targets)


def _merged(case: Case) -> dict:
    """Experiments that differ from the case's in seed *and* batch size, chosen so that an encoding that merges
    the two numbers (their digits written side by side, their sum) gives them the same text or value."""
    found = {}
    moved = (case.seed // 10, int(f"{case.seed % 10}{case.batch}"))  # the seed's last digit moved to the batch
    if case.seed % 10 and moved != (case.seed, case.batch):
        found["seed and batch size (a digit moved from one to the other)"] = moved
    if case.batch > 1 and case.seed < 2**32 - 1:
        found["seed and batch size (their sum kept)"] = (case.seed + 1, case.batch - 1)
    return {what: (data_for(case), _config(case, seed=s, batch_size=b)) for what, (s, b) in found.items()}


def contract_variants(case: Case) -> dict:
    """Input -> (data, config) of an experiment that differs from the case's in that input alone (or, in
    `_merged`, in two inputs at once where a lossy encoding would merge them)."""
    data = data_for(case)
    rows, width = case.shape()
    rng = np.random.default_rng([case.seed, 3])
    large = timing_fixture()
    edited = large.features.copy()
    edited[-64:] = edited[-64:][::-1]
    other_rows = replace(case, rows=rows - 1 if rows > 1 else 2, fixture="")
    other_width = replace(case, features=case.features % 9 + 1, fixture="")
    step = 2.0**-20
    return {
        "seed": (data, _config(case, seed=(case.seed + 1) % 2**32)),
        "batch size": (data, _config(case, batch_size=case.batch + 1)),
        "learning rate (x(1 + 2^-20))": (data, _config(case, learning_rate=case.learning_rate * (1 + step))),
        "decay (+-2^-20)": (data, _config(case, decay=case.decay + step if case.decay < 0.5 else case.decay - step)),
        # Config holds them as Python floats: the next float64 is another learning rate (an entry kept as a float32
        # merges the two)
        "learning rate (the next float64)": (
            data,
            _config(case, learning_rate=float(np.nextafter(case.learning_rate, np.inf))),
        ),
        "decay (the next float64)": (data, _config(case, decay=float(np.nextafter(case.decay, np.inf)))),
        "device count": (data, _config(case, num_devices=case.devices % 4 + 1)),
        "rows": (
            data_for(other_rows) if not case.fixture else Dataset(data.features[:-1], data.targets[:-1]),
            _config(case),
        ),
        "feature width": (
            data_for(other_width) if not case.fixture else Dataset(data.features[:, :-1], data.targets),
            _config(case),
        ),
        "one ulp of one feature": (_ulp(data, "features", int(rng.integers(rows * width))), _config(case)),
        "one ulp of one target": (_ulp(data, "targets", int(rng.integers(rows))), _config(case)),
        "every feature + 1": (Dataset(data.features + np.float32(1), data.targets), _config(case)),
        "every target + 1": (Dataset(data.features, data.targets + np.float32(1)), _config(case)),
        **_merged(case),
        **({"two rows swapped": (_swapped(data), _config(case))} if _swapped(data) is not None else {}),
        **(
            {"two targets swapped, features kept": (_targets_swapped(data), _config(case))}
            if _targets_swapped(data) is not None
            else {}
        ),
        **({RESHAPED: (_reshaped(data), _config(case))} if _reshaped(data) is not None else {}),
        "large fixture: last 64 rows reordered": (Dataset(edited, large.targets), _config(case)),
        "large fixture: one ulp of its last feature": (_ulp(large, "features", -1), _config(case)),
        # NumPy's repr shows only the first and last three rows of a large array: an edit in the middle
        "large fixture: one target in the middle + 1": (_middle_edited(large), _config(case)),
    }


def _same_experiment_other_forms(ctx, case: Case, data: Dataset, base: dict) -> None:
    """Equal experiments in other forms: the data as the other pair type, the learning rate and decay as NumPy
    scalars. The first must give the contract `base` is; the second a plain JSON contract (rule:contract-json)."""
    copies = Dataset(data.features.copy(), data.targets.copy())
    other = copies if isinstance(given(case, data), tuple) else tuple(copies)
    form = "the course's Dataset" if isinstance(other, Dataset) else "a plain (features, targets) tuple"
    theirs = called(ctx, "contract", other, _config(case))
    need(
        theirs == base,
        base,
        theirs,
        f"the same data passed as {form} gave another contract: data is any (features, targets) pair, and equal "
        "inputs give an equal contract -> hash the arrays' bytes, shapes and dtypes, not the container (no pickle, "
        "no repr of the object)"
        + formulas.mark("plain-tuple-data", "contract-json")
        + known_causes.mark("contract-varies"),
    )
    for how, theirs in _elsewhere_and_laid_out(ctx, case, data).items():
        need(
            theirs == base,
            base,
            theirs,
            f"the same experiment {how} gave another contract: equal inputs give an equal contract, in any layout "
            "of the same values and from any folder -> hash the values in one layout (np.ascontiguousarray(a)"
            ".tobytes(), never the buffer as it lies: tobytes(order='A'), a memoryview) together with shapes and "
            "dtypes, and nothing of the process (working folder, process id, time)"
            + formulas.mark("contract-json")
            + known_causes.mark("contract-varies"),
        )
    for words, (rate, decay) in _numbers_config_accepts(case).items():
        try:
            numpy_config = _config(case, learning_rate=rate, decay=decay)
        except (errors.ConfigError, TypeError):
            continue
        theirs = called(ctx, "contract", given(case, data), numpy_config)
        need(
            _plain_json(theirs),
            "plain JSON data (int, float, str, list, dict)",
            {k: type(v).__name__ for k, v in theirs.items()} if isinstance(theirs, dict) else type(theirs).__name__,
            f"with the learning rate and decay given as {words} (Config(learning_rate=np.float32(...)) and the like, "
            "which Config accepts) the contract is not plain JSON -> convert each number with int(...) or float(...) "
            "before it goes in, whatever number type it comes in" + formulas.mark("contract-json"),
        )


def _numbers_config_accepts(case: Case) -> dict:
    """Words -> a learning rate and decay in other number types Config accepts: the case's values as NumPy float32
    scalars and as 0-d float64 arrays, and the integers 1 and 0 as NumPy int8 and uint64 scalars (the last another
    experiment: only the contract's form is asked of it)."""
    return {
        "NumPy float32 scalars": (np.float32(case.learning_rate), np.float32(case.decay)),
        "0-d float64 arrays": (np.asarray(case.learning_rate, np.float64), np.asarray(case.decay, np.float64)),
        "NumPy integers (np.int8(1), np.uint64(0))": (np.int8(1), np.uint64(0)),
    }


LAID_OUT = "with the same values in other memory layouts (features in Fortran order, targets a strided column)"
ELSEWHERE = "called from another working folder"


def _elsewhere_and_laid_out(ctx, case: Case, data: Dataset) -> dict:
    """How -> the contract of the case's experiment given in another memory layout, and called from another
    working folder: each must be the case's own contract."""
    found = {LAID_OUT: contract_of(ctx, replace(case, data_form="views"), data, _config(case), LAID_OUT)}
    folder, here = os.path.join(ctx.workdir, "another-folder"), os.getcwd()
    os.makedirs(folder, exist_ok=True)
    try:
        os.chdir(folder)
        found[ELSEWHERE] = called(ctx, "contract", given(case, data), _config(case))
    finally:
        os.chdir(here)
    return found


# the same bytes read as another dtype (same shapes): another dataset, whose contract differs, or a refusal
REREAD = {"the features' bytes read as int32": "<i4", "the features' bytes read as big-endian float32": ">f4"}


def _reread_ignored(ctx, case: Case, data: Dataset, base: dict) -> list[str]:
    """The REREAD datasets (the case's feature bytes in another dtype) whose contract is the case's own; a contract
    that refuses such data tells it apart too."""
    ignored = []
    for what, dtype in REREAD.items():
        if not focused(ctx, what):
            continue
        other = Dataset(np.ascontiguousarray(data.features).view(np.dtype(dtype)), data.targets)
        try:
            theirs = called(ctx, "contract", given(case, other), _config(case))
        except (Miss, NotImplementedError):
            raise
        except Exception:
            continue
        if theirs == base:
            ignored.append(what)
    return ignored


def _plain_json(value) -> bool:
    try:
        return json.loads(json.dumps(value)) == value
    except (TypeError, ValueError):
        return False


DIGEST_BITS = 64  # at least this much of the contract must follow the data: 32 bits collide in ~77,000 datasets


def _bits(values: list) -> float:
    """How many bits a leaf can carry, from the values it took: an int's bit length, 4 a hex digit, 6 a character,
    53 a float's mantissa (a float is compared exactly), 1 a bool."""
    found = 0.0
    for value in values:
        if isinstance(value, bool) or value is None:
            found = max(found, 1)
        elif isinstance(value, int):
            found = max(found, abs(value).bit_length())
        elif isinstance(value, float):
            found = max(found, 53)
        elif isinstance(value, str):
            hexadecimal = all(c in "0123456789abcdefABCDEF" for c in value)
            found = max(found, (4 if hexadecimal else 6) * len(value))
    return found


def _data_bits(ctx, case: Case, base, data: Dataset) -> tuple[float, list]:
    """(bits, paths): how much of the contract changes with the data's values alone (same shapes, same config)."""
    base_leaves = dict(leaves(base))
    rng = np.random.default_rng([case.seed, 5])
    rows, width = case.shape()
    changed, seen = set(), {}
    for position in rng.integers(rows * width, size=4):
        other = called(ctx, "contract", given(case, _ulp(data, "features", int(position))), _config(case))
        for path, value in leaves(other):
            if base_leaves.get(path, object()) != value:
                changed.add(path)
            seen.setdefault(path, []).append(value)
    paths = sorted(changed, key=repr)
    return sum(_bits([base_leaves.get(p)] + seen.get(p, [])) for p in paths), ["/".join(map(str, p)) for p in paths]


LIMITS = {"learning_rate": np.float32(10), "decay": np.float32(1)}  # Config's open upper bounds


def float32_neighbours(value: float, name: str) -> list[float]:
    """`value` rounded to float32, then the float32 numbers exactly one step below and above it (those Config
    accepts): the values rule:contract-exact calls other experiments."""
    base = np.float32(value)
    steps = (np.nextafter(base, np.float32(0)), np.nextafter(base, np.float32(np.inf)))
    return [float(base)] + [float(s) for s in steps if 0 < s < LIMITS[name] and s != base]


def magnitude_pairs(case: Case) -> list[tuple[str, Config, Config]]:
    """(what, config, config exactly one float32 step away) for learning rates and decays drawn across every
    magnitude Config accepts (log-uniform down to 1e-30), just above a power of ten (where a fixed number of
    significant digits is coarsest: 1 part in 10^6 for seven digits, against 1 in 8e6 to 1.7e7 for a float32
    step) and at the case's own values; both neighbours of each, so a rounding bucket cannot hide them both.
    A contract that rounds to decimals, exact at the course's 0.03 and 0.8, or to seven significant
    digits ("float32 holds about seven"), is shown two experiments it merges."""
    rng = np.random.default_rng([case.seed, 11])
    drawn = {
        "learning_rate": [
            float(10 ** rng.uniform(-30, 0.99)),
            float(10.0 ** int(rng.integers(-30, 1)) * (1 + rng.uniform(0, 1e-3))),
            case.learning_rate,
        ],
        "decay": [
            float(10 ** rng.uniform(-30, 0)) * 0.99,
            float(10.0 ** int(rng.integers(-30, 0)) * (1 + rng.uniform(0, 1e-3))),
            case.decay,
        ],
    }
    pairs = []
    for name, values in drawn.items():
        label = name.replace("_", " ")
        for value in values:
            if value == 0:  # decay 0 has neighbours of another magnitude only (subnormals)
                continue
            base, *others = float32_neighbours(value, name)
            for other in others:
                pairs.append(
                    (
                        f"{label} {base:.9g} and {other:.9g} (one float32 step apart)",
                        _config(case, **{name: base}),
                        _config(case, **{name: other}),
                    )
                )
    return pairs


INPUT_NOTE = "on the input "  # how a property names, on a learner's exception, the input it was called with


def _layout(data) -> str:
    """The arrays of `data` that are not laid out in C order, in words ('' if every one is)."""
    found = []
    for name, array in zip(("features", "targets"), data):
        array = np.asarray(array)
        if not array.flags.c_contiguous:
            kind = "Fortran order" if array.flags.f_contiguous else "a strided view"
            found.append(f"{name} of shape {array.shape} not C-contiguous ({kind})")
    return "; ".join(found)


def contract_of(ctx, case: Case, data, config, what: str):
    """The learner's contract of `data`; an exception it raises is noted with the input it was given (`what`, and
    any array not in C order: valid data of another memory layout), which `search._attempt` adds to its verdict."""
    given_data = given(case, data)
    try:
        return called(ctx, "contract", given_data, config)
    except (Miss, NotImplementedError):
        raise
    except Exception as exc:
        layout = _layout(given_data)
        exc.add_note(
            f"{INPUT_NOTE}{what!r}"
            + (
                f": {layout} -> any (features, targets) pair of float32 arrays is valid data, whatever its memory "
                "layout: read its values (np.ascontiguousarray before hashing the bytes), never its buffer as it lies"
                if layout
                else ""
            )
        )
        raise


HUGE_ROWS = 2**20 + 1  # rows of a dataset past any size a contract might start to sample at (1e5, 1e6, 2^20)
HUGE_EDIT = 524_309  # a prime row in its middle: every k-th row from the first (k > 1) or a prefix leaves it out
HUGE = f"a dataset of {HUGE_ROWS:,} rows: row {HUGE_EDIT:,}'s feature and target + 1"


def _fresh(value):
    """A copy of a value built once per process (the lru_cache'd datasets and samplers below) for one run to hand to
    the learner: what its function changes in place is written back into its caller's arrays (wire.write_back), and
    must not reach the next run in this process, whose verdict would then depend on the runs before it."""
    if isinstance(value, Dataset):
        return Dataset(value.features.copy(), value.targets.copy())
    return value.copy() if isinstance(value, np.ndarray) else value


@functools.lru_cache(maxsize=1)
def _huge_pair() -> tuple[Dataset, Dataset]:
    """A dataset of HUGE_ROWS rows x 1 feature, and the same with one row's values changed (16 MB, built once)."""
    rows = np.arange(HUGE_ROWS)
    first = Dataset((rows % 1009).astype(np.float32).reshape(-1, 1) / 8, (rows % 13).astype(np.float32))
    features, targets = first.features.copy(), first.targets.copy()
    features[HUGE_EDIT, 0] += 1
    targets[HUGE_EDIT] += 1
    return first, Dataset(features, targets)


def _huge_ignored(ctx) -> bool:
    """Whether the contract of the huge pair (the course's default configuration) is equal: asked once per run."""
    if HUGE not in ctx.cache:
        config, (first, second) = _config(Case()), (_fresh(pair) for pair in _huge_pair())
        ctx.cache[HUGE] = contract_of(ctx, Case(), first, config, HUGE) == contract_of(
            ctx, Case(), second, config, HUGE
        )
    return ctx.cache[HUGE]


def _ignored_variants(ctx, case: Case, base: dict) -> list[str]:
    """The asked variants of `contract_variants` whose contract equals that of the data they were made from (the
    case's, or the large fixture's, computed only when a variant of it is asked)."""
    variants, ignored, large = contract_variants(case), [], None
    for what, (other, config) in variants.items():
        if not focused(ctx, what):
            continue
        reference = base
        if what.startswith("large"):
            if large is None:
                large = contract_of(ctx, case, timing_fixture(), _config(case), "the 1,023 x 64 fixture")
            reference = large
        if contract_of(ctx, case, other, config, what) == reference:
            ignored.append(what)
    return ignored


IN_PLACE = "one feature + 1, changed in place in the arrays an earlier call was given"


def _in_place_told_apart(ctx, case: Case, data: Dataset) -> None:
    """A Miss when the contract of the same array objects is the one they had before one of their values changed in
    place, while fresh copies of the changed values get another: the contract was kept by the arrays' identity (a
    cache keyed by id()), not computed from their bytes. A contract blind to that value itself is left to the
    variants (the fresh copies' contract is then the old one too)."""
    features = data.features.copy()
    position = np.unravel_index(int(np.random.default_rng([case.seed, 11]).integers(features.size)), features.shape)
    position = tuple(int(i) for i in position)
    # where contract runs: across the wire every call's arrays are new objects there
    seen = probe("contract_changed_in_place", ctx.impl.contract, given(case, data), _config(case), position)
    first, again = seen["first"], seen["again"]
    features[position] += np.float32(1)
    fresh = contract_of(ctx, case, Dataset(features, data.targets.copy()), _config(case), IN_PLACE)
    need(
        again != first or fresh == first,
        "another contract once a feature of the arrays changed, as fresh copies of the changed arrays get",
        "the contract those arrays had before the change",
        f"feature {position} of the arrays given to an earlier call was changed in place "
        "(+1), and the contract of those same arrays stayed the one they had before, while fresh copies of the "
        "changed values get another: the contract is kept between calls by the arrays' identity (a cache keyed by "
        "id() or by the object), not computed from their bytes -> compute the contract from the data's bytes on "
        "every call; an id is reused and an array's values change under it" + formulas.mark("contract-pins"),
    )


def _same_experiment_told_apart(ctx, case: Case, data, base: dict, again: dict) -> None:
    """Fail for a contract of fresh copies of the data unlike the first one, naming why from a third call given the
    first call's own arrays: equal to the first, the contract follows the arrays' identity (kept by id() or by the
    object, whatever address the process gave them); unequal, it varies from call to call."""
    same = called(ctx, "contract", given(case, data), _config(case)) == base
    raise Miss(
        base,
        again,
        "the same experiment (fresh copies of the data) must give an equal contract"
        + (
            ": given the first call's own arrays again it gives the first contract, so it is kept by the arrays' "
            "identity (a cache keyed by id() or by the object), not computed from their bytes -> compute the "
            "contract from the data's bytes on every call" + formulas.mark("contract-pins")
            if same
            else ": it changes from call to call -> build it from the data bytes and the configuration only (no "
            "counter, time or random draw)" + formulas.mark("contract-json") + known_causes.mark("contract-varies")
        ),
    )


def contract_tells_apart(ctx, case: Case) -> None:
    """The contract is plain JSON, equal for equal experiments and different when any one input changes."""
    data, (rows, width) = data_for(case), case.shape()
    base = contract_of(ctx, case, data, _config(case), "the case's data")
    need(
        _plain_json(base),
        "plain JSON data",
        type(base).__name__,
        "the contract is plain JSON (it goes in an NPZ)" + formulas.mark("contract-json"),
    )
    again = called(ctx, "contract", given(case, Dataset(data.features.copy(), data.targets.copy())), _config(case))
    if again != base:
        _same_experiment_told_apart(ctx, case, data, base, again)
    _same_experiment_other_forms(ctx, case, data, base)
    ignored = _ignored_variants(ctx, case, base) + _reread_ignored(ctx, case, data, base)
    if focused(ctx, IN_PLACE):
        _in_place_told_apart(ctx, case, data)
    for part in ("features", "targets"):  # each pair's first dataset may itself differ from the case's data
        what = f"one ulp of one {part[:-1]}, alike at 8 printed digits"
        pair = _hidden_ulp(data, part, int(np.random.default_rng([case.seed, 7]).integers(rows * width)))
        if pair is not None and focused(ctx, what):
            first = base if pair[0] is data else contract_of(ctx, case, pair[0], _config(case), what)
            if contract_of(ctx, case, pair[1], _config(case), what) == first:
                ignored.append(what)
    asked = {}  # label -> what a shrink asks again: a pair's values move with the case, its place does not
    for number, (what, first, second) in enumerate(magnitude_pairs(case)):
        asked[what] = f"float32 neighbours {number}"
        if focused(ctx, asked[what]) and called(ctx, "contract", given(case, data), first) == called(
            ctx, "contract", given(case, data), second
        ):
            ignored.append(what)
    bits, paths = _data_bits(ctx, case, base, data)
    need(
        not paths or bits >= DIGEST_BITS,
        f"the data's part of the contract carries >= {DIGEST_BITS} bits",
        {"entries that follow the data": paths, "bits": bits},
        f"the data enter the contract through {paths}, which carry about {bits:g} bits: a {bits:g}-bit digest "
        f"gives two different datasets the same contract, half the time, among {1.18 * 2 ** (bits / 2):,.0f} "
        "datasets (the birthday bound) -> pin the data with a full sha256 hex digest of every data byte"
        + formulas.mark("contract-pins"),
    )
    if not ignored and focused(ctx, HUGE) and _huge_ignored(ctx):  # asked last: the costliest, 2^20 + 1 rows
        ignored.append(HUGE)
    if ignored:
        raise Miss(
            "a different contract for each changed input",
            f"equal for {ignored}",
            f"the contract ignores {ignored} -> pin the exact values (no rounding), each input in an entry of its own "
            "(numbers written side by side or added up merge two experiments), and a hash of every data byte together "
            "with the arrays' shapes and dtypes"
            + formulas.mark(
                *(["contract-exact"] if any(w.startswith(("learning rate", "decay")) for w in ignored) else []),
                *(["contract-pins"] if any(not w.startswith(("learning rate", "decay")) for w in ignored) else []),
            )
            + "".join(known_causes.mark(_ignored_cause(what)) for what in ignored),
            tuple(asked.get(what, what) for what in ignored),
        )


def _ignored_cause(what: str) -> str:
    """The cause id of a contract that gives two experiments differing in `what` (a contract_variants label) alike."""
    if what.startswith(("learning rate", "decay")):
        return "hyperparameter-float64-merged" if "float64" in what else "hyperparameter-rounded"
    settings = what in ("seed", "batch size", "device count") or what.startswith("seed and batch size")
    return "contract-ignores-setting" if settings else "contract-ignores-data"


def _save_path(ctx, case: Case, folder: str) -> tuple[str, str | None]:
    """(path as the case spells it, a working directory to enter for a bare name)."""
    if case.path == "bare":
        return case.file_name, folder
    if case.path == "other":
        return os.path.join(folder, case.file_name), None
    if case.path == "home":  # a relative path whose first folder is named "~": no shell expands it, nor may save
        os.makedirs(os.path.join(folder, "~", "runs"))
        return os.path.join("~", "runs", case.file_name), folder
    os.makedirs(os.path.join(folder, "stored", "seed", "step"))
    os.symlink("stored", os.path.join(folder, "runs"))  # the nested folders are reached through a link
    return os.path.join(folder, "runs", "seed", "step", case.file_name), None


def _folder(ctx, case: Case) -> str:
    """A new folder for one case: on another file system (/dev/shm) for path='other' when there is one."""
    if case.path == "other" and ctx.other_fs:
        return tempfile.mkdtemp(prefix="case-", dir=ctx.other_fs)
    return tempfile.mkdtemp(prefix="case-", dir=ctx.workdir)


def _trained_to(ctx, case: Case, data, mesh):
    """The state after the case's save point: step 0, the first epoch's last batch, or one batch into epoch 2."""
    per_epoch = len(oracle.epoch_batches(case.shape()[0], case.batch))
    at = {"start": 0, "end": per_epoch, "mid": per_epoch + 1}[case.save_at]
    state = initial_checked(ctx, case, data, mesh, "the state was trained, saved and restored")
    plan = oracle.walk(case.shape()[0], case.seed, case.batch, at)
    for call in range(at):
        state, _, _ = _transitioned(ctx, case, state, data, mesh, step_of(ctx, case), call)
        fields = snapshot(state)
        want = plan[call]
        # the state save is given is judged first: restore is never blamed for a state no course run reaches
        need(
            recipe.follows(fields, want) and int(fields["step"]) == call + 1,
            {**want["after"], "step": call + 1},
            {k: fields.get(k) for k in ("cursor", "key", "order", "step")},
            f"the state after transition {call + 1} is already wrong, before save and restore ran: its sampler "
            "fields (or step) leave the course's coverage arithmetic -> fix next_batch or transition first; restore "
            "is not judged on a state no run of the course reaches" + formulas.mark("cursor", "reshuffle"),
        )
    return state, at


def restore_damage(ctx, case: Case) -> None:
    """A valid checkpoint (any save point, any path form) is accepted exactly; every damaged copy is refused."""
    data, mesh = data_for(case), mesh_of(ctx, case.devices, case.layout)
    state, at = _trained_to(ctx, case, data, mesh)
    contract = called(ctx, "contract", given(case, data), _config(case))
    folder = _folder(ctx, case)
    here = os.getcwd()
    try:
        path, cwd = _save_path(ctx, case, folder)
        if cwd:
            os.chdir(cwd)
        elsewhere = other_mesh_of(ctx, case.devices, case.layout)  # restore places on the mesh it is given, any devices
        restored = _save_and_restore(ctx, case, path, state, contract, elsewhere, at)
        _restored_rules(state, restored, elsewhere, at)
        _restored_dtypes(restored, case.shape(), at)
        need(*dtypes_verdict(state, restored, f"restore of a checkpoint at step {at}"))
        _large_values_accepted(ctx, case, path, state, contract, mesh, at)
        _long_run_step_kept(ctx, case, path, state, contract, mesh)
        _large_order_kept(ctx, case, path, mesh)
        _wide_checkpoint_kept(ctx, case, path, mesh)
        refused = _damage_verdicts(ctx, case, path, state, contract, mesh, data)
        try:  # judged after the damaged copies, whose verdict names a cache by path where one shows there first
            _replaced_at_the_same_path(ctx, case, path, state, contract, data, mesh, elsewhere, at)
            replaced = None
        except Miss as miss:
            replaced = miss
    finally:
        os.chdir(here)
        shutil.rmtree(folder, ignore_errors=True)
    accepted = {what: rule for what, (ok, rule) in refused.items() if not ok}
    typed = [what for what, rule in accepted.items() if "; refused with " in rule]  # refused, with another error
    said = "restore accepted damaged checkpoints"
    if typed:
        said = (
            f"{said} or refused them with another error type than the course's"
            if len(typed) < len(accepted)
            else "restore refused checkpoints with another error type than the course's"
        )
    need(
        not accepted,
        f"all {len(refused)} damaged copies refused with the course's errors",
        f"{'refused with another error' if len(typed) == len(accepted) else 'accepted'} {sorted(accepted)}",
        f"{said}: "
        + "; ".join(f"{w} ({r})" for w, r in accepted.items())
        + formulas.mark(*dict.fromkeys(_damage_kind(what)[1] for what in accepted))
        + "".join(known_causes.mark(c) for c in dict.fromkeys(_damage_cause(w, r) for w, r in accepted.items())),
    )
    if replaced is not None:
        raise replaced


def _damage_cause(what: str, verdict: str) -> str:
    """The cause id of restore's verdict `verdict` on the damaged copy named `what`: refused with another error
    than the course's, or accepted, by the kind of damage it accepted."""
    return "refusal-not-the-courses" if "; refused with " in verdict else _damage_kind(what)[0]


def _damage_kind(what: str) -> tuple[str, str]:
    """(cause id of accepting it, course rule it breaks: a learner/rules.py id) of the damaged copy named `what`."""
    if "pickled" in what:
        return "pickled-member", "plain-npz"
    if what.startswith("contract: ") or "another experiment" in what:
        return "accepts-another-experiment", "contract-first"
    if what.split(": ")[-1] in ("NaN", "+inf", "-inf"):
        return "accepts-non-finite", "refuse-nan"
    return "accepts-damaged-field", "validate-fields"


def _large_values_accepted(ctx, case: Case, path: str, state: dict, contract: dict, mesh, at: int) -> None:
    """The same state with weights and momentum of the largest float32 magnitudes is saved and restored exactly.

    The weights alternate in sign; the momentum does not, so a finiteness test that sums a field (the sum
    of two 3e38 values is infinite in float32) refuses this valid checkpoint.
    """
    width = case.shape()[1]
    signs = np.where(np.arange(width) % 2, np.float32(-1), np.float32(1))
    large = {
        **state,
        "weights": _as_field(state["weights"], (signs * np.float32(1e30)).astype(np.float32)),
        "momentum": _as_field(state["momentum"], np.full(width, LARGE, dtype=np.float32)),
    }
    other = _beside(path, "large-")
    try:
        called(ctx, "save", other, large, contract)
        restored = called(ctx, "restore", other, contract, mesh)
    except Exception as exc:
        raise Miss(
            "the checkpoint saved and restored",
            _learner_error(exc),
            f"a valid checkpoint at step {at} with weights of magnitude 1e30 and momentum of magnitude 3e38 (large, "
            "finite float32 values) was refused -> finite means np.isfinite of every element, not a bound on the "
            "magnitude and not a test of a sum (two 3e38 values sum to inf in float32)",
        ) from exc
    for name in ("weights", "momentum"):
        want, got = host(large[name]), host(restored.get(name))
        need(np.array_equal(want, got), want, got, f"restore must return the saved {name} exactly (large values)")


def _as_field(value, numbers):
    """`numbers` in the form of a state field: a plain int, a NumPy value or array of the field's dtype (int64 where
    that dtype cannot hold them), or a device array placed as the field is."""
    numbers = np.asarray(numbers)
    if isinstance(value, jax.Array) and not typed_key(value):
        return jax.device_put(numbers.astype(value.dtype), value.sharding)
    if isinstance(value, (np.ndarray, np.generic)) and np.issubdtype(np.asarray(value).dtype, np.integer):
        kind = np.asarray(value).dtype
        return numbers.astype(kind if np.iinfo(kind).max >= numbers.max(initial=0) else np.int64)
    return int(numbers) if numbers.ndim == 0 else numbers


def _moved_to(state: dict, fields: dict) -> dict:
    """`state` with `fields` (sampler fields, step) in place of its own, each in the form of the field it replaces."""
    return {**state, **{name: _as_field(state[name], value) for name, value in fields.items()}}


def _long_run_step(rows: int, batch: int) -> int | None:
    """The first step from LONG_RUN_STEP on whose cursor lies inside an epoch (0 < cursor < rows), so the checkpoint
    differs from the case's own in its step alone; None where every cursor is an epoch's end (batch >= rows)."""
    per_epoch = len(oracle.epoch_batches(rows, batch))
    inside = [s for s in range(LONG_RUN_STEP, LONG_RUN_STEP + per_epoch) if ((s - 1) % per_epoch + 1) * batch < rows]
    return inside[0] if inside else None


@functools.lru_cache(maxsize=32)
def _long_run_sampler(seed: int, rows: int, batch: int, step: int) -> dict:
    """Key, order and cursor of the course's sampler after `step` transitions (the course's arithmetic)."""
    from shardlab.core.sampler import sampler_at

    return sampler_at(seed, rows, batch, step)


def _long_run_step_kept(ctx, case: Case, path: str, state: dict, contract: dict, mesh) -> None:
    """The state of a run at a long run's step (`_long_run_step`: the case's weights, the sampler that step implies)
    is saved and restored with that step exactly."""
    rows = case.shape()[0]
    step = _long_run_step(rows, case.batch)
    if step is None:
        return
    sampler = {name: _fresh(value) for name, value in _long_run_sampler(case.seed, rows, case.batch, step).items()}
    long_run = _moved_to(state, {**sampler, "step": step})
    at = f"{step:,}"
    fix = (
        "store cursor and step in an integer type that holds every value a run reaches (np.int64), and restore "
        "them as the same integers"
    )
    what = f"a valid checkpoint of the run at step {at} (a long run's step, the sampler that step implies)"
    got = _restored_field(ctx, _beside(path, "long-"), long_run, contract, mesh, what, f" -> {fix}", "step")
    need(
        got is not None and got.ndim == 0 and np.issubdtype(got.dtype, np.number) and got == step,
        step,
        got,
        f"the state saved at step {at} (a long run's step) came back with step {got}: an integer "
        f"type too narrow for the step wraps it -> {fix}" + formulas.mark("exact-resume"),
    )


@functools.lru_cache(maxsize=16)
def _many_rows(width: int) -> Dataset:
    """LARGE_ROWS rows x `width` features of small distinct-looking values (only the row count matters here)."""
    values = (np.arange(LARGE_ROWS * width, dtype=np.float32) % 251) / np.float32(16)
    return Dataset(values.reshape(LARGE_ROWS, width), (np.arange(LARGE_ROWS) % 7).astype(np.float32))


def _large_order_kept(ctx, case: Case, path: str, mesh) -> None:
    """The learner's own first state of a run on LARGE_ROWS rows (the case's width, seed, batch size and devices) is
    saved and restored with its order exactly, ids up to 65,536. Tried in the cases saved at the start (every search
    meets one: the save points cycle), and from the learner's `initial`, so the permutation of 65,537 ids is drawn
    in its interpreter alone, where a restore that replays the sampler finds it compiled."""
    if case.save_at != "start":
        return
    data = given(case, _fresh(_many_rows(case.shape()[1])))
    contract = called(ctx, "contract", data, _config(case, batch_size=1))  # batch 1: see _float32_step_kept
    large = called(ctx, "initial", case.seed, data, mesh)
    fix = (
        "an integer type too narrow for the ids (int16 holds 32,767, uint16 65,535) wraps them -> store the order "
        "as np.int32 or np.int64, whatever the row count"
    )
    what = f"a valid checkpoint of a run on data of {LARGE_ROWS:,} rows (its first state)"
    got = _restored_field(ctx, _beside(path, "rows-"), large, contract, mesh, what, f": {fix}", "order")
    want = host(large["order"])
    need(
        got is not None and np.array_equal(got, want),
        f"the order of {LARGE_ROWS:,} ids as saved",
        None if got is None else {"dtype": str(got.dtype), "max": int(np.max(got, initial=0))},
        f"a checkpoint of a run on data of {LARGE_ROWS:,} rows came back with another order: {fix}"
        + formulas.mark("exact-resume"),
    )
    _float32_step_kept(ctx, case, path, large, contract, mesh)


FLOAT32_STEP = 2**24 + 1  # the first integer float32 cannot hold (it rounds to 2**24): a run of 65,537 rows in
# batches of 1 reaches it in its 257th epoch (a run of a few hundred epochs, as the course's are)


def _float32_step_kept(ctx, case: Case, path: str, large: dict, contract: dict, mesh) -> None:
    """The run of `_large_order_kept` (LARGE_ROWS rows, batch size 1) at step FLOAT32_STEP, its sampler the one that
    step implies (the oracle's), is saved and restored with that step exactly: a counter kept as a float32 rounds
    it to 2**24. One save and one restore more, on the contract `_large_order_kept` already asked for."""
    long_run = _moved_to(large, {**oracle.sampler_after(case.seed, LARGE_ROWS, 1, FLOAT32_STEP), "step": FLOAT32_STEP})
    at = f"{FLOAT32_STEP:,} (2**24 + 1, a long run's step)"
    fix = (
        "keep cursor and step in an integer type that holds every step a run reaches (np.int64), in the file and "
        "when read back: float32 holds every integer only up to 2**24, int16 up to 32,767"
    )
    what = f"a valid checkpoint of a run on {LARGE_ROWS:,} rows in batches of 1 at step {at}"
    got = _restored_field(ctx, _beside(path, "float32-"), long_run, contract, mesh, what, f" -> {fix}", "step")
    number = got is not None and got.ndim == 0 and np.issubdtype(got.dtype, np.number)
    rounded = number and got == np.float32(FLOAT32_STEP) and got != FLOAT32_STEP
    need(
        number and np.issubdtype(got.dtype, np.integer) and got == FLOAT32_STEP,
        FLOAT32_STEP,
        None if got is None else f"{got.dtype} {got.tolist()}",
        f"the state saved at step {at} came back with step {None if got is None else got.tolist()}"
        + (": the step went through a float32, which rounds it to 2**24" if rounded else "")
        + f" -> {fix}"
        + formulas.mark("exact-resume"),
    )


WIDE_FEATURES = 2**21 + 1  # 1 row of this many features: weights and momentum alone take 16 MiB and 8 bytes


@functools.lru_cache(maxsize=1)
def _wide_row() -> Dataset:
    """One row of WIDE_FEATURES features (8 MiB): a valid experiment whose checkpoint is larger than 16 MiB."""
    return Dataset((np.arange(WIDE_FEATURES, dtype=np.float32) % 61 / 8).reshape(1, -1), np.ones(1, np.float32))


def _wide_checkpoint_kept(ctx, case: Case, path: str, mesh) -> None:
    """The learner's own first state of a run on one row of WIDE_FEATURES features (its initial and contract, the
    case's seed, batch size and devices) is saved and restored, its weights as saved: a file past 16 MiB that its own
    save wrote is a valid checkpoint. Tried in the cases saved at the start, as `_large_order_kept`."""
    if case.save_at != "start":
        return
    data = given(case, _fresh(_wide_row()))
    contract = called(ctx, "contract", data, _config(case))
    wide = called(ctx, "initial", case.seed, data, mesh)
    what = f"a valid checkpoint of a run on 1 row x {WIDE_FEATURES:,} features (its first state, over 16 MiB)"
    fix = (
        " -> restore accepts every file its own save writes, whatever its size: bound a file by the sizes the "
        "expected contract gives its members, never by a fixed number of bytes"
    )
    got = _restored_field(ctx, _beside(path, "wide-"), wide, contract, mesh, what, fix, "weights")
    need(
        got is not None and np.array_equal(got, host(wide["weights"])),
        f"the {WIDE_FEATURES:,} weights as saved",
        None if got is None else {"shape": list(np.shape(got))},
        f"{what} came back with other weights" + formulas.mark("exact-resume"),
    )


def _beside(path: str, prefix: str) -> str:
    """A new name in the folder of `path`: its file name after `prefix`."""
    return os.path.join(os.path.dirname(os.path.abspath(path)), prefix + os.path.basename(path))


def _restored_field(ctx, path: str, state: dict, contract: dict, mesh, what: str, fix: str, field: str):
    """`field` of what the learner's restore gives back after its save of `state` at `path`, on the host (None where
    it gives no such field); a refusal of this valid checkpoint is a Miss (`_saved_and_restored`)."""
    restored = _saved_and_restored(ctx, path, state, contract, mesh, what, fix)
    found = restored.get(field) if isinstance(restored, dict) else None
    return None if found is None else host(found)


def _saved_and_restored(ctx, path: str, state: dict, contract: dict, mesh, what: str, fix: str) -> dict:
    """The learner's save of `state` at `path`, then its restore: a refusal of this valid checkpoint is a Miss."""
    try:
        called(ctx, "save", path, state, contract)
        return called(ctx, "restore", path, contract, mesh)
    except Exception as exc:
        raise Miss(
            "the checkpoint saved and restored",
            _learner_error(exc),
            f"{what} was refused ({_learner_error(exc)[:120]}){fix}" + formulas.mark("exact-resume"),
        ) from exc


def _learner_error(exc: Exception) -> str:
    if isinstance(exc, (NotImplementedError, Miss)):
        raise exc
    return wire.learner_error(exc)


def _joined_elsewhere() -> str:
    """Why a relative path landed in another folder: joined to a working folder kept from before the call."""
    return (
        f"the same relative path joined to another folder than the working folder at the call ({os.getcwd()!r}), "
        "such as one read once at import (os.getcwd() kept in a module variable) -> use the path exactly as given: "
        "a relative path is relative to the working folder when save is called"
    )


def _misplaced(path: str, returned, written: bool, spelt: bool, home: str) -> str:
    """Why save's file or returned path is not the path given, from what is on disk and what it returned. `home` is
    the HOME the learner's code runs with (the run's scratch area: a "~" it expands lands there)."""
    expanded = os.path.join(home, os.path.relpath(path, "~")) if path.startswith("~" + os.sep) else None
    if not written and expanded and os.path.exists(expanded):
        return (
            f"path: the path given starts with a folder named '~' and is relative to the working folder, but the file "
            f"went to the home folder ({expanded!r}, this run's stand-in for $HOME): save expanded '~' "
            "(os.path.expanduser), which the caller never asked for -> use the path exactly as given"
        )
    moved = os.fspath(returned) if spelt else ""
    if not os.path.isabs(path) and os.path.isabs(moved) and moved != os.path.abspath(path):
        if moved.endswith(os.sep + os.path.normpath(path)) and os.path.exists(moved):
            return (
                f"path: the path given is relative ({path!r}), and save wrote and returned {moved!r}: "
                + _joined_elsewhere()
            )
    if written and spelt and not os.path.isabs(os.fspath(returned)):
        named = os.fspath(returned)
        return (
            f"path: the file is at that path, but save returned {named!r}, a relative path that names it only from "
            + (
                "its own folder (a save that moves into the folder, os.chdir, and writes the bare file name there "
                "also moves its caller's working folder)"
                if os.path.basename(path) == os.path.basename(named)
                else "another working folder"
            )
            + " -> never change the working folder; write and return the path argument itself"
        )
    if written:
        return f"path: the file is at that path, but save returned {returned!r} -> return the path argument itself"
    tidied = (path.strip(), os.path.join(os.path.dirname(path), os.path.basename(path).strip()))
    stripped = next((p for p in tidied if p != path and os.path.exists(p)), None)
    if stripped:
        return (
            f"path: the file name given ({os.path.basename(path)!r}) has spaces at its ends, but the file went to "
            f"{stripped!r}: save stripped them (str.strip), which the caller never asked for -> use the path exactly "
            "as given, spaces included"
        )
    folder, name = os.path.split(path)
    for form in ("NFC", "NFD", "NFKC", "NFKD"):
        other = os.path.join(folder, unicodedata.normalize(form, name))
        if other != path and os.path.exists(other):
            return (
                f"path: the file name given ({name!r}) is not in Unicode normal form {form}, and the file went to "
                f"{os.path.basename(other)!r}, its {form} form: save normalised the name (unicodedata.normalize), "
                "so it lands beside or onto another file -> use the path exactly as given, its code points as they are"
            )
    if os.path.exists(path + ".npz"):
        return "path: np.savez appends .npz to a file *name* that lacks it, so hand it an open file"
    return "path: no file is at that path (what the folder holds is shown) -> write exactly there"


def _expanded_words(path: str, written: bool, home: str) -> str | None:
    """Why the file is not at the path given, where it lies at the path with its $HOME or %HOME% expanded."""
    expanded = None if written else _expanded_vars(path, home)
    if not expanded:
        return None
    return (
        f"path: the name given holds $ or % characters ({os.path.basename(path)!r}), but the file went to "
        f"{expanded!r}: save expanded environment variables in it (os.path.expandvars), which the caller never "
        "asked for -> use the path exactly as given: $, % and ~ are characters of the name like any other"
    )


def _expanded_vars(path: str, home: str, exc: Exception | None = None) -> str | None:
    """The path with $HOME, ${HOME} or %HOME% replaced by `home` (the HOME the learner's code runs with), where that
    is not the path itself and the file is there (or, given `exc`, the error names it): a save that expanded
    environment variables (os.path.expandvars, or its Windows form) wrote or failed there."""
    posix = path.replace("${HOME}", home).replace("$HOME", home)
    for other in (posix, path.replace("%HOME%", home), posix.replace("%HOME%", home)):
        if other != path and (os.path.exists(other) if exc is None else other in str(exc)):
            return other
    return None


def _elsewhere(path: str, exc: Exception) -> str | None:
    """A path the error names that ends with the relative folder given but lies in another working folder."""
    given = os.path.dirname(path)
    if os.path.isabs(path) or not given:
        return None
    here = os.path.abspath(given)
    for named in re.findall(r"'(/[^']+)'", str(exc)):
        folder = os.path.dirname(named)
        if folder != here and folder.endswith(os.sep + given):
            return named
    return None


def _failed_save(path: str, exc: Exception, home: str) -> str:
    """Why a save of a valid state raised, from what the folder holds afterwards and what the error names."""
    named = _elsewhere(path, exc)
    expanded = None if os.path.exists(path) else _expanded_vars(path, home, exc)
    if expanded:
        return (
            f"the error names {expanded!r}, the path given with its $ or % variables expanded: save expanded them "
            "(os.path.expandvars), which the caller never asked for -> use the path exactly as given"
            + formulas.mark("exact-path")
        )
    if not os.path.exists(path) and named:
        return (
            f"the path given is relative ({path!r}) and the error names {named!r}: "
            + _joined_elsewhere()
            + formulas.mark("exact-path")
        )
    if not os.path.exists(path):
        return (
            "save must work for a bare file name, nested folders and another file system: write the temporary file "
            "in the target's own folder"
        )
    said = (
        f"the checkpoint was published at the path ({path!r} exists) and then save raised: the failure came after "
        "the rename, and a save that raises must leave its folder as it was" + formulas.mark("new-temp-name")
    )
    if os.path.dirname(path) == "" and getattr(exc, "filename", None) == "":
        said += (
            "; the path is a bare file name, whose os.path.dirname is '' and no folder: the error names '' -> open "
            "the folder to fsync as os.path.dirname(os.path.abspath(path)) (or '.' where the folder part is empty)"
            + formulas.mark("exact-path")
        )
    return said


def _save_and_restore(ctx, case: Case, path: str, state: dict, contract: dict, mesh, at: int) -> dict:
    """The learner's save of a valid state at `path`, exactly there, and its restore of that file."""
    cursor, rows = int(state["cursor"]), case.shape()[0]
    try:
        returned = called(ctx, "save", path, state, contract)
    except Exception as exc:
        home = os.path.join(ctx.workdir, HOME)
        expanded = path.startswith("~") and any(h in str(exc) for h in (home, os.path.realpath(home)))
        expanded = expanded and not _expanded_vars(path, home, exc)  # $HOME in the name, not the '~', went there
        raise Miss(
            "the checkpoint saved",
            _learner_error(exc),
            f"save of a valid state at step {at} ({case.path} path, file name {case.file_name!r}) failed -> "
            + (
                f"it failed in the home folder ({home!r}, this run's stand-in for $HOME), not at the path given "
                f"({path!r}, relative, through a folder named '~'): save expanded '~' (os.path.expanduser), which "
                "the caller never asked for -> use the path exactly as given" + formulas.mark("exact-path")
                if expanded
                else _failed_save(path, exc, home)
            ),
        ) from exc
    written = os.path.exists(path)
    spelt = isinstance(returned, (str, os.PathLike))
    respelt = written and spelt and os.path.realpath(returned) == os.path.realpath(path)
    need(
        written and spelt and os.path.abspath(os.fspath(returned)) == os.path.abspath(path),
        {"written and returned": path},
        {"returned": returned, "folder holds": sorted(os.listdir(os.path.dirname(os.path.abspath(path))))},
        f"save must write the checkpoint at exactly the path it is given ({path!r}, any file name) and return that "
        + (
            f"path as given: it returned {os.fspath(returned)!r}, the same file reached another way (realpath "
            "resolves links such as this case's linked folder, and the caller asked for the link) -> return the "
            "path argument itself"
            if respelt
            else _expanded_words(path, written, os.path.join(ctx.workdir, HOME))
            or _misplaced(path, returned, written, spelt, os.path.join(ctx.workdir, HOME))
        )
        + formulas.mark("exact-path"),
    )
    try:
        return called(ctx, "restore", path, contract, mesh)
    except Exception as exc:
        # the cursor bound is named only when the refusal speaks of the cursor and the cursor sits on a bound
        hint = _refused_valid(exc, cursor, rows, int(state["step"]))
        expanded = _expanded_vars(path, os.path.join(ctx.workdir, HOME), exc)
        if expanded:
            hint = (
                f"the refusal names {expanded!r}, the path given with $HOME or %HOME% expanded: restore expanded "
                "environment variables in it (os.path.expandvars), which the caller never asked for -> read the "
                "path exactly as given" + formulas.mark("exact-resume")
            )
        raise Miss(
            "the checkpoint restored",
            _learner_error(exc),
            f"a valid checkpoint at step {at} (cursor {cursor} of {rows}, {case.path} path) was refused -> {hint}",
        ) from exc


MISSING_WORDS = ("missing", "lack", "absent", "no cursor", "no step", "not found", "empty")
BOUND_WORDS = ("outside", "bound", "range", "<", ">", "exceed", "too large", "negative")


def _refused_valid(exc: Exception, cursor: int, rows: int, step: int) -> str:
    """Why restore refused a valid checkpoint, from the values on a bound and the refusal's words: every cause
    that fits (a bounds test on cursor 0 or rows; a presence test by truthiness that takes a saved 0 for missing)."""
    said = str(exc).lower()
    zero = [name for name, value in (("cursor", cursor), ("step", step)) if value == 0]
    truthiness = (
        f"{' and '.join(zero)} {'is' if len(zero) == 1 else 'are'} 0, which is falsy: a presence test on the value "
        "(`if not arrays.get(name)`, `value or ...`) takes a saved 0 for a missing field -> test `name in "
        "arrays` (the member is there), never the value's truth"
    )
    bounds = "cursor 0 and cursor = rows are both in bounds (0 <= cursor <= rows)"
    missing = any(word in said for word in MISSING_WORDS)
    bounded = any(word in said for word in BOUND_WORDS)
    if zero and missing and not bounded:
        return truthiness
    if cursor in (0, rows) and "cursor" in said:
        if zero and not bounded:
            return f"the numbers fit 2 mistakes: (1) {bounds}; (2) {truthiness}"
        return bounds
    return f"restore must accept every valid checkpoint its own save writes; it raised at {raised_where(exc)}"


def _restored_rules(state: dict, restored: dict, mesh, at: int) -> None:
    for name in FIELDS:
        want, got = host(state[name]), host(restored.get(name))
        need(np.array_equal(want, got), want, got, f"restore of a checkpoint at step {at} must return the saved {name}")
    saved, back = _kinds({n: state[n] for n in FIELDS}), _kinds({n: restored[n] for n in FIELDS})
    moved = [n for n in FIELDS if saved[n] == "host" and back[n] != "host"]
    need(
        not moved,
        saved,
        back,
        f"restore of a checkpoint at step {at} put fields the saved state kept on the host on the devices "
        f"({', '.join(moved)}) -> give the sampler's key and order back as host NumPy (np.asarray), as saved",
    )
    for name in ("weights", "momentum"):
        _placement(restored[name], mesh, P(), f"the restored {name}", "exact-resume")


def _field_form(value) -> str:
    """A field's dtype and shape as the rules speak of them ('uint32(2,)'), a typed PRNG key named as such."""
    if typed_key(value):
        return f"a typed PRNG key of dtype {value.dtype}"
    found = np.asarray(value)
    return f"{found.dtype}{found.shape}"


def _restored_dtypes(restored: dict, shape: tuple, at: int) -> None:
    """Every restored field has the dtype and shape the rules give the state (rule:exact-resume, as validate-fields
    and initial-fields state them):
    weights and momentum float32 (d,), the legacy uint32 (2,) key, integer ids (n,), cursor and step 0-d integers.
    Equal values in another dtype (a key widened to int64, a step as a float) are another state."""
    rows, width = shape
    wanted = {
        "weights": ("float32", (width,), lambda d: d == np.float32),
        "momentum": ("float32", (width,), lambda d: d == np.float32),
        "key": ("uint32", (2,), lambda d: d == np.uint32),
        "order": ("an integer dtype", (rows,), lambda d: np.issubdtype(d, np.integer)),
        "cursor": ("an integer dtype", (), lambda d: np.issubdtype(d, np.integer)),
        "step": ("an integer dtype", (), lambda d: np.issubdtype(d, np.integer)),
    }
    wrong = {}
    for name, (dtype, want, fits) in wanted.items():
        value = restored.get(name)
        found = np.asarray(value) if value is not None and not typed_key(value) else None
        if found is None or found.shape != want or not fits(found.dtype):
            wrong[name] = (f"{dtype} {want}", _field_form(value))
    need(
        not wrong,
        {name: w for name, (w, _) in wrong.items()},
        {name: f for name, (_, f) in wrong.items()},
        f"restore of a checkpoint at step {at} gave back {', '.join(f'{n} as {f}' for n, (_, f) in wrong.items())}: "
        "the same numbers in another dtype are another state"
        + (" (a key widened from uint32 is no longer the legacy PRNG key)" if "key" in wrong else "")
        + (" (a counter held as a float rounds past 2**24)" if {"cursor", "step"} & set(wrong) else "")
        + " -> give each field back in the dtype the state has: weights and momentum float32, the key uint32 (2,), "
        "the order integer ids, cursor and step integers" + formulas.mark("exact-resume"),
    )


ARRAY_FIELDS = ("weights", "momentum", "key", "order")  # the fields the rules give a dtype (cursor and step: integers)


def _dtype(value):
    """A field's NumPy dtype, or None where it has none (a Python number, a list, a typed PRNG key)."""
    if isinstance(value, jax.Array):
        return None if typed_key(value) else np.dtype(value.dtype)
    return value.dtype if isinstance(value, (np.ndarray, np.generic)) else None


def dtypes_changed(state: dict, restored: dict) -> dict:
    """Field -> (the saved state's dtype, the restored one's) for every field restore gave back in another dtype than
    the state it was saved from holds (rule:exact-resume): a file may keep the order in any integer width, but the
    state comes back in the state's own; a cursor or step the state holds as a Python int comes back as one (a
    NumPy integer is another type, which json.dumps refuses)."""
    found = {}
    for name in ARRAY_FIELDS:
        saved, back = _dtype(state.get(name)), _dtype(restored.get(name))
        if saved is not None and back is not None and saved != back:
            found[name] = (saved.name, back.name)
    for name in ("cursor", "step"):
        saved, back = state.get(name), restored.get(name)
        if type(saved) is int and type(back) is not int and name in restored:
            found[name] = ("a Python int", _scalar_form(back))
    return found


def _scalar_form(value) -> str:
    """What a cursor or step is, in words: 'a NumPy int64', 'a 0-d int64 array', 'a jax.Array int32', or its type."""
    if isinstance(value, np.generic):
        return f"a NumPy {value.dtype}"
    if isinstance(value, np.ndarray):
        return f"a {value.ndim}-d {value.dtype} array"
    if isinstance(value, jax.Array):
        return f"a jax.Array {value.dtype}"
    return f"a {type(value).__name__}"


def dtype_words(changed: dict, what: str) -> str:
    """The verdict on `dtypes_changed`'s answer, in the course's words."""
    return (
        f"{what} gave back "
        + ", ".join(f"{name} as {back} where the saved state held {saved}" for name, (saved, back) in changed.items())
        + ": the same numbers in another dtype are another state (a file may store them in any width, the state "
        "it restores does not change with it) -> give each field back in the dtype the saved state holds (the one "
        "your initial and next_batch give it), converting what the file stores"
        + (
            " (a counter the state holds as a Python int comes back as int(...): json.dumps refuses a NumPy integer)"
            if {"cursor", "step"} & set(changed)
            else ""
        )
        + formulas.mark("exact-resume")
    )


def dtypes_verdict(state: dict, restored: dict, what: str) -> tuple:
    """(passed, expected, found, diagnosis) of `dtypes_changed` for `need` or `expect`: one verdict for every check
    that compares a restored state's dtypes with the saved one's."""
    changed = dtypes_changed(state, restored)
    return (
        not changed,
        {name: saved for name, (saved, _) in changed.items()},
        {name: back for name, (_, back) in changed.items()},
        dtype_words(changed, what) if changed else "",
    )


READ_EVERY_CALL = "read and check the file at every call (no cache by path: a path can hold another checkpoint later)"


def _restored_as(ctx, path: str, contract: dict, mesh, want: dict, how: str, earlier: dict, rows: int) -> None:
    """restore of `path` (now holding `want`'s checkpoint, put there `how`) returns `want`, not `earlier`."""
    try:
        got = called(ctx, "restore", path, contract, mesh)
    except Exception as exc:
        cursor, step = int(host(want["cursor"])), int(host(want["step"]))
        raise Miss(
            "the checkpoint restored",
            _learner_error(exc),
            f"a valid checkpoint at step {step} (cursor {cursor} of {rows}, {how}) was refused -> "
            f"{_refused_valid(exc, cursor, rows, step)}" + formulas.mark("exact-resume"),
        ) from exc
    same = {n: np.array_equal(host(want[n]), host(got.get(n))) for n in FIELDS}
    old = all(np.array_equal(host(earlier[n]), host(got.get(n))) for n in FIELDS)
    shown = {n: host(got.get(n)).tolist() for n in ("cursor", "step")}
    need(
        all(same.values()),
        {n: host(want[n]).tolist() for n in ("cursor", "step")},
        shown,
        (
            f"restore gave back the state restored earlier from the same path (step {int(earlier['step'])}), not the "
            f"checkpoint now there (step {int(want['step'])}, {how}): an answer remembered by path (and contract) "
            f"outlives the file -> {READ_EVERY_CALL}"
            if old
            else f"restore of the checkpoint at step {int(want['step'])} ({how}) must return the saved "
            + ", ".join(n for n, ok in same.items() if not ok)
        )
        + formulas.mark("exact-resume"),
    )


def _replaced_at_the_same_path(ctx, case: Case, path: str, state, contract, data, mesh, elsewhere, at: int) -> None:
    """A path restored once may hold another checkpoint later: removed and saved anew with the next state, and
    replaced by a rename with the first again, it restores what it holds each time (save_at=start: step 0, then 1)."""
    later, _, _ = _transitioned(ctx, case, state, data, mesh, step_of(ctx, case), at)
    rows = case.shape()[0]
    os.remove(path)
    called(ctx, "save", path, later, contract)
    _restored_as(ctx, path, contract, elsewhere, later, "removed and saved anew at the same path", state, rows)
    beside = _beside(path, "renamed-")
    called(ctx, "save", beside, state, contract)
    os.replace(beside, path)
    _restored_as(ctx, path, contract, elsewhere, state, "another checkpoint renamed over the path", later, rows)


def _damage_files(ctx, case, path, state, contract, data) -> dict:
    """Damage name -> (damaged copy of the learner's file, the course rule), its members found by value."""
    arrays = read_npz(path)
    rows, folder = case.shape()[0], os.path.join(os.path.dirname(os.path.abspath(path)), "damaged")
    os.makedirs(folder)
    members = damage.locate(arrays, snapshot(state), contract)
    files = {}
    structure = damage.drawn(np.random.default_rng([case.seed, rows, case.shape()[1], 17]), arrays, members)
    for number, (field, kind, rule, change) in enumerate((*damage.DAMAGES, *structure)):
        copy = damage.damaged(arrays, members.get(field), kind, change, rows)
        if copy is not None:
            target = os.path.join(folder, f"{number}.npz")
            faults.written(target, copy)
            files[damage.name(field, kind)] = (target, rule)
    for number, (kind, copy) in enumerate(damage.pickled(arrays, members, os.path.join(folder, "ran")).items()):
        target = os.path.join(folder, f"pickled-{number}.npz")
        faults.written(target, copy)
        files[kind] = (target, damage.PICKLE)
    cut, text = faults.unreadable(path, folder).values()
    files["truncated file"] = (cut, damage.WHOLE_FILE["truncated file"])
    for number, how in enumerate(faults.ARCHIVE_DAMAGE):
        target = faults.archive_damaged(path, os.path.join(folder, f"archive-{number}.npz"), how)
        if target is not None:
            files[how] = (target, damage.WHOLE_FILE[how])
    files["not an NPZ file"] = (text, damage.WHOLE_FILE["not an NPZ file"])
    other = os.path.join(folder, "other.npz")
    theirs = called(ctx, "contract", given(case, data), _config(case, batch_size=case.batch + 1))
    called(ctx, "save", other, state, theirs)
    files["another experiment's contract"] = (other, damage.WHOLE_FILE["another experiment's contract"])
    return files


def other_experiments(ctx, case: Case, contract: dict) -> dict:
    """Input changed -> the contract of the experiment that differs from the case's in that input alone.

    Only those whose contract differs (a contract that ignores an input is `contract_tells_apart`'s finding).
    """
    found = {}
    for what, (other, config) in contract_variants(case).items():
        if not what.startswith("large"):
            theirs = called(ctx, "contract", given(case, other), config)
            if theirs != contract:
                found[what] = theirs
    return found


def _damage_attempts(ctx, case, path, state, contract, data) -> dict:
    """What -> (file, expected contract, rule): the damaged copies, the learner's file given another experiment's
    contract (every input changed alone, by one ulp where it is a number) and, saved at the start, a larger
    experiment's file given this one's."""
    files = _damage_files(ctx, case, path, state, contract, data)
    attempts = {what: (target, contract, rule) for what, (target, rule) in files.items()}
    other = damage.WHOLE_FILE["another experiment"]
    for what, theirs in other_experiments(ctx, case, contract).items():
        attempts[f"given another experiment's contract ({what})"] = (path, theirs, other)
    if case.save_at == "start":
        larger = _larger_checkpoint(ctx, case, os.path.dirname(files["truncated file"][0]))
        attempts[f"given another experiment's file ({LARGER})"] = (larger, contract, other)
    folder = os.path.dirname(files["truncated file"][0])
    attempts.update(
        {
            what: (target, contract, rule)
            for what, (target, rule) in _non_finite_saves(ctx, case, path, state, contract, folder).items()
        }
    )
    return attempts


def _non_finite_saves(ctx, case: Case, path: str, state: dict, contract: dict, folder: str) -> dict:
    """Damage name -> (a checkpoint holding the state with one float field non-finite, otherwise valid, the rule).

    A copy damaged after the save keeps the file's own checksum or signature of the valid values, so a restore
    that compares those refuses it without ever testing finiteness; a diverged state saved by your own save carries
    a matching one, and only a test of the values themselves refuses it (rule:refuse-nan). Every float field of the
    state gets each of NaN, +inf and -inf, at a position set by the seed. A save that refuses the diverged state (the
    course's own does) writes nothing: then your own file at `path` (which holds `state`) gets the value instead, in
    its own format, with its integrity member (the course's hash, if the file holds one) recomputed over it."""
    found = {}
    arrays = read_npz(path)
    members = damage.locate(arrays, snapshot(state), contract)
    for field in (name for name in FIELDS if _float_field(state.get(name))):
        for number, kind, changed in damage.diverged(host(state[field]), case.seed):
            target = os.path.join(folder, f"non-finite-{field}-{number}.npz")
            try:
                called(ctx, "save", target, {**state, field: _as_field(state[field], changed)}, contract)
            except (NotImplementedError, Miss):
                raise
            except Exception:  # refusing to save a diverged state is the course's own choice
                copy = damage.resealed(arrays, members, field, changed)
                if copy is None:
                    continue
                if os.path.lexists(target):  # a refusing save must leave nothing; the copy takes a name of its own
                    target = os.path.join(folder, f"non-finite-{field}-{number}-own-format.npz")
                faults.written(target, copy[0])
                how = "in your file, its integrity hash recomputed" if copy[1] else "in your file"
                found[damage.name(f"{field} {how}", kind)] = (target, damage.non_finite_rule(field, damage.RESEALED))
                continue
            found[damage.name(f"{field} written by your save", kind)] = (
                target,
                damage.non_finite_rule(field, damage.SAVED),
            )
    return found


def _float_field(value) -> bool:
    """Whether a state field holds floating-point numbers (weights and momentum: the fields a run can make diverge)."""
    kind = getattr(value, "dtype", None)
    return kind is not None and not typed_key(value) and np.issubdtype(np.dtype(kind), np.floating)


def _damage_verdicts(ctx, case, path, state, contract, mesh, data) -> dict:
    """Damage name -> (refused?, the course rule): the damage space of the learner's own file, and its own
    file given the contract of another experiment (every input changed alone, by one ulp where it is a number)."""
    attempts = _damage_attempts(ctx, case, path, state, contract, data)
    verdicts, ran = {}, os.path.join(os.path.dirname(attempts["truncated file"][0]), "ran")
    for what, (target, expected, rule) in attempts.items():
        if what.startswith("contract: "):
            error = OTHER_EXPERIMENT
        elif "another experiment" in what:
            error = errors.ContractMismatchError  # any shapes: the contract is compared before any field
        else:
            error = errors.CorruptCheckpointError
        try:
            called(ctx, "restore", target, expected, mesh)
        except (NotImplementedError, Miss):
            raise
        except error:
            verdicts[what] = (True, rule)
        except Exception as exc:
            verdicts[what] = (False, _wrong_refusal(what, rule, error, exc))
        else:  # an extra member a restore never reads may stay unread: what it must never do is unpickle it
            unread = what == damage.EXTRA_PICKLED and not os.path.exists(ran)
            verdicts[what] = (
                (True, rule) if unread else (False, _accepted_cause(ctx, target, expected, mesh, error, rule, path))
            )
        if os.path.exists(ran):  # the pickled payload was unpickled: restore read with allow_pickle=True
            os.remove(ran)
            verdicts[what] = (False, f"{verdicts[what][1]}; the pickle RAN inside restore (its payload created a file)")
    return verdicts


def _larger_checkpoint(ctx, case: Case, folder: str) -> str:
    """The learner's own checkpoint at step 0 of 1 row x LARGER_FEATURES features (its initial, contract and save)."""
    features = np.random.default_rng([case.seed, LARGER_FEATURES]).normal(size=(1, LARGER_FEATURES))
    large = Dataset(features.astype(np.float32), np.ones(1, np.float32))
    mesh = mesh_of(ctx, case.devices, case.layout)
    state = called(ctx, "initial", case.seed, given(case, large), mesh)
    theirs = called(ctx, "contract", given(case, large), _config(case))
    target = os.path.join(folder, "larger.npz")
    called(ctx, "save", target, state, theirs)
    return target


def _wrong_refusal(what: str, rule: str, error, exc: Exception) -> str:
    """Why a refusal with `exc`, not `error`, breaks `rule`: for another experiment of other shapes refused as
    corrupt, the fields were checked before the contracts were compared."""
    named = " or ".join(f"errors.{e.__name__}" for e in (error if isinstance(error, tuple) else (error,)))
    said = f"{rule}; refused with {type(exc).__name__}, not {named}"
    if isinstance(exc, errors.CorruptCheckpointError) and any(f"({shape})" in what for shape in OTHER_SHAPES):
        said += SIZE_FIRST if f"({LARGER})" in what else FIELDS_FIRST
    return said


def _accepted_cause(ctx, target: str, expected: dict, mesh, error, rule: str, path: str) -> str:
    """Why restore accepted `target`: when it is the valid file restored earlier in this case, the same bytes are
    restored again under a new name. Refused there, restore gave an earlier answer for a path it had read, without
    reading or comparing again; accepted there too, the comparison (or the field check) is at fault."""
    if os.path.abspath(target) != os.path.abspath(path):
        return rule
    again = tempfile.mkdtemp(prefix="again-", dir=os.path.join(os.path.dirname(os.path.abspath(path)), "damaged"))
    copy = os.path.join(again, os.path.basename(path))
    shutil.copyfile(path, copy)
    try:
        called(ctx, "restore", copy, expected, mesh)
    except (NotImplementedError, Miss):
        raise
    except error:
        return (
            "not the comparison: the same bytes under a new name are refused, so restore gave back an earlier "
            f"answer for a path it had read before, without reading and comparing again -> {READ_EVERY_CALL}"
        )
    except Exception:
        return rule
    return rule
