"""Stage 3 checks: `contract`, `save` and `restore`, judged by replay against an uninterrupted run.

The control is the same implementation continuing in memory from the state it saved; the
resumed run restores that checkpoint (in this interpreter, then in a fresh one) and must
follow the control exactly: every sampler field, every id, every loss and weight.
"""

import contextlib
import json
import os
import re

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

import shardlab.checker.arguments as arguments
import shardlab.checker.causes as known_causes
import shardlab.checker.damage as damage
import shardlab.checker.interrupt as interrupt
import shardlab.checker.search as search
import shardlab.checker.wire as wire
from shardlab import errors
from shardlab.checker.common import (
    CheckFailed,
    attempt,
    cached_step,
    changed_inputs,
    expect,
    fingerprint,
    fresh_implementation,
    host,
    leaves,
    plain,
    raised_where,
    see,
    sharding_of,
    snapshot,
)
from shardlab.checker.formulas import mark
from shardlab.checker.probes import probe
from shardlab.checker.properties import OTHER_EXPERIMENT, dtypes_verdict
from shardlab.core.config import Config
from shardlab.core.fixtures import Dataset
from shardlab.core.state import FIELDS
from shardlab.io import read_npz
from shardlab.verify import faults, replay
from shardlab.verify.oracle import epoch_batches

STAGE = 3
WEIGHT_TOLERANCE = 1e-6  # float32 allowance for weights, momentum and losses; the sampler gets none


def _config(ctx, **changes) -> Config:
    return Config(**{"seed": ctx.seed, "batch_size": ctx.batch_size, **changes})


def _resume_steps(ctx) -> int:
    """More than two further epochs."""
    return 2 * len(epoch_batches(ctx.data.features.shape[0], ctx.batch_size)) + 2


def _trained(ctx) -> tuple[dict, object]:
    """(state one batch past the first epoch boundary, the step function), computed once per run."""
    if "trained" not in ctx.cache:
        step = cached_step(ctx)
        at = faults.save_step(ctx.data.features.shape[0], ctx.batch_size)
        head = replay.run(
            ctx.impl.initial(ctx.seed, ctx.data, ctx.mesh),
            ctx.data,
            ctx.batch_size,
            at,
            ctx.mesh,
            step,
            ctx.impl.transition,
        )
        ctx.cache["trained"] = head["state"], step
    return ctx.cache["trained"]


def _control(ctx) -> dict:
    """The uninterrupted run: the trained state continued in memory."""
    if "control" not in ctx.cache:
        state, step = _trained(ctx)
        ctx.cache["control"] = replay.run(
            state, ctx.data, ctx.batch_size, _resume_steps(ctx), ctx.mesh, step, ctx.impl.transition
        )
    return ctx.cache["control"]


def _saved(ctx, folder: str, name: str = "checkpoint.npz") -> tuple[str, dict, dict]:
    """(path, state, contract): the trained state saved to a new file `name` in workdir/folder."""
    state, _ = _trained(ctx)
    contract = ctx.impl.contract(ctx.data, _config(ctx))
    changes = json_changes(contract)
    expect(
        not changes,
        "plain JSON data: json.loads(json.dumps(contract)) == contract, every entry of the same type",
        changes,
        f"the contract is not plain JSON data: {'; '.join(changes)}. A contract saved as JSON text comes back in "
        "that other form, so a restore that compares it with the run's own sees two forms of one experiment -> build "
        "the contract from plain JSON values (lists, not tuples; str keys)"
        + mark("contract-json", cause="contract-json-form"),
    )
    os.makedirs(os.path.join(ctx.workdir, folder), exist_ok=True)
    path = os.path.join(ctx.workdir, folder, name)
    before = fingerprint(contract)
    ctx.impl.save(path, state, contract)
    _contract_kept(before, contract)
    return path, state, contract


def json_changes(value, where: str = "contract") -> list[str]:
    """Where `value` differs from what its own JSON text reads back as (a tuple read back as a list, an int key as
    a str): one phrase per entry. Empty for plain JSON data, and for a value json.dumps refuses (other checks name
    NumPy scalars and objects)."""
    try:
        back = json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return []
    return _json_changes(value, back, where)


def _json_changes(value, back, where: str) -> list[str]:
    if type(value) is not type(back):
        return [f"{where} is a {type(value).__name__}, read back as a {type(back).__name__}"]
    if isinstance(value, dict):
        keys = [key for key in value if not isinstance(key, str)]
        found = [f"{where} has key(s) {keys[:3]} of type {type(keys[0]).__name__}, read back as str"] if keys else []
        for key in (key for key in value if isinstance(key, str)):
            found += _json_changes(value[key], back[key], f"{where}[{key!r}]")
        return found
    if isinstance(value, list):
        return [change for n, item in enumerate(value) for change in _json_changes(item, back[n], f"{where}[{n}]")]
    return []


def _contract_kept(before, contract: dict) -> None:
    """Fail naming save's change when the contract a save was given no longer has the fingerprint `before`."""
    changed = changed_inputs([before], [fingerprint(contract)], ["contract"])
    expect(
        not changed,
        "the contract as the caller passed it",
        changed,
        f"save changed the contract it was given ({'; '.join(changed)}), so the contract this run holds at restore "
        "is no longer the one save wrote: restoring that file compares two contracts of the same experiment in two "
        "forms -> never assign into an argument; convert a copy of the contract (or only its JSON text)"
        + mark("save-inputs-intact"),
    )


def _members(path: str) -> dict:
    folder = os.path.dirname(path)
    expect(
        os.path.exists(path),
        f"a file at {path} when save returned",
        {"folder holds": sorted(os.listdir(folder)) if os.path.isdir(folder) else "no folder"},
        f"save returned, but no file is at the path it was given ({os.path.basename(path)}): the checkpoint must be "
        "written and published before save returns -> do every write, the fsync and the publication inside save "
        "itself; work left to a thread, an executor or a later call has not happened when the caller reads the file"
        + (", and np.savez appends .npz to a name that lacks it" if os.path.exists(path + ".npz") else "")
        + mark("exact-path"),
    )
    try:
        return read_npz(path)
    except Exception as exc:
        expect(
            False,
            "an NPZ readable with allow_pickle=False",
            f"{type(exc).__name__}: {exc}",
            "save writes the six fields (and the contract) with np.savez; no pickled objects"
            + mark(cause="pickled-member"),
        )


def _refused(call) -> tuple[bool, str]:
    """(raised, what): run `call`, which should refuse."""
    error = attempt(call)[1]
    return bool(error), error or "accepted (no error)"


def contract_pins_the_experiment(ctx):
    """The contract is plain data, stable, and changes with seed, batch size, optimiser, devices and data."""
    base = ctx.impl.contract(ctx.data, _config(ctx))
    expect(base == ctx.impl.contract(ctx.data, _config(ctx)), "equal contracts", "different", "contract is stable")
    features = ctx.data.features.copy()
    features[0, 0] += 1.0
    changes = {
        "seed": (ctx.data, _config(ctx, seed=ctx.seed + 1)),
        "batch size": (ctx.data, _config(ctx, batch_size=ctx.batch_size + 3)),
        "learning rate": (ctx.data, _config(ctx, learning_rate=0.05)),
        "momentum decay": (ctx.data, _config(ctx, decay=0.5)),
        "device count": (ctx.data, _config(ctx, num_devices=2)),
        "data bytes": (Dataset(features, ctx.data.targets), _config(ctx)),
        "data shape": (Dataset(ctx.data.features[:-1], ctx.data.targets[:-1]), _config(ctx)),
    }
    ignored = [what for what, args in changes.items() if ctx.impl.contract(*args) == base]
    return expect(
        not ignored,
        "a different contract for each change",
        f"unchanged for {ignored}",
        f"the contract ignores {ignored}, which make another experiment -> include shapes, dtypes, a data hash, "
        "seed, batch size, learning rate, momentum and device count (a checkpoint of another experiment would be "
        "accepted)" + mark(cause="contract-ignores-data" if set(ignored) & {"data bytes", "data shape"} else None),
    )


def _restore(ctx, path: str, contract, mesh=None) -> dict:
    """The learner's restore of `path`; fails naming restore when the call changed the contract it was given (a
    later call with that dict, the caller's own, would compare the file with a contract restore altered)."""
    before = fingerprint(contract)
    try:
        return ctx.impl.restore(path, contract, mesh or ctx.mesh)
    finally:
        changed = changed_inputs([before], [fingerprint(contract)], ["contract"])
        expect(
            not changed,
            "the expected contract as the caller passed it",
            changed,
            f"restore changed the contract it was given ({'; '.join(changed)}): the caller's dict no longer holds "
            "this experiment's contract, so every later restore with it compares the file with a contract restore "
            "altered itself -> read the expected contract, never assign into it, pop or delete its entries (copy it "
            "first if another form is needed)" + mark("restore-inputs-intact"),
        )


def _restored(ctx, path: str, contract: dict) -> tuple[dict, str]:
    """(the state the learner's own restore gives for `path`, or {}; the error it raised, or '')."""
    return attempt(lambda: _restore(ctx, path, contract), {})


def _differ(restored: dict, state: dict) -> list[str]:
    """The fields of `state` that `restored` does not give back exactly."""
    return [n for n in FIELDS if n not in restored or not np.array_equal(host(restored[n]), host(state[n]))]


NARROW_FLOATS = ("float16", "bfloat16")  # the floats a lossy save may store a float32 field in


def rounded_to(saved, back) -> str | None:
    """The narrower float (float16, bfloat16) whose rounding of float `saved` gives exactly `back`, if any: a field
    stored in that dtype and cast back, where a field lost or reset gives other values."""
    saved, back = host(saved), host(back)
    if saved.dtype.kind != "f" or back.shape != saved.shape or back.dtype.kind not in "fV" or not saved.any():
        return None
    for dtype in NARROW_FLOATS:
        if np.dtype(dtype).itemsize < saved.dtype.itemsize:
            cast = saved.astype(dtype)
            if not np.array_equal(cast, saved) and np.array_equal(cast.astype(np.float64), back.astype(np.float64)):
                return dtype
    return None


def _rounded_members(members: dict, state: dict, names: list) -> dict:
    """Field -> (member, dtype) for each of `names` some member holds only rounded to a narrower float."""
    found = {}
    for name in names:
        held = ((member, rounded_to(state[name], value)) for member, value in members.items())
        first = next(((member, dtype) for member, dtype in held if dtype), None)
        if first:
            found[name] = first
    return found


def checkpoint_holds_every_field(ctx):
    """save writes a plain NPZ (read with allow_pickle=False) that holds all six fields: restore gives them back.

    The course names the six fields of the state, not the NPZ members: a field counts as held when the
    learner's own restore returns it, or failing that when some member holds its value under any name.
    """
    path, state, contract = _saved(ctx, "fields")
    members = _members(path)
    restored, error = _restored(ctx, path, contract)
    missing = [name for name in _differ(restored, state) if not damage.holding(members, host(state[name]))]
    rounded = _rounded_members(members, state, missing)
    expect(
        not rounded,
        {name: f"{host(state[name]).dtype}, bit for bit" for name in rounded},
        {name: f"member {member!r} holds it as {dtype}" for name, (member, dtype) in rounded.items()},
        f"the checkpoint holds {sorted(rounded)} only rounded: "
        + "; ".join(
            f"member {member!r} is the state's {name} cast to {dtype}" for name, (member, dtype) in rounded.items()
        )
        + ", so no restore can give the saved values back and the resumed run leaves the uninterrupted one -> save "
        "every field in the dtype the state holds (float32 weights and momentum)"
        + mark("plain-npz", "exact-resume", cause="field-saved-narrow"),
    )
    hint = " (momentum is optimiser history: it cannot be rebuilt)" if "momentum" in missing else ""
    expect(
        not missing,
        f"{list(FIELDS)}, each given back by restore or held by a member",
        f"no member holds {missing}; members {sorted(members)}" + (f"; restore raised {error}" if error else ""),
        f"the checkpoint lacks {missing}{hint} -> save all six fields" + mark(cause="field-missing"),
    )
    _saved_in_another_form(ctx, state, contract)
    return (
        f"{list(FIELDS)}, each given back by restore or held by a member, also saved from a state written another way",
        "as expected",
    )


def _saved_in_another_form(ctx, state: dict, contract: dict) -> None:
    """save of the same state written another way, as another correct sampler or a restore may hand it over: cursor
    and step as NumPy int64 scalars, the order in the other integer width. save must leave that dict and its values
    as they were (rule:save-inputs-intact: no entry normalised in place), and restore give back every value."""
    order = host(state["order"])
    other = {
        **state,
        "order": order.astype(np.int32 if order.dtype == np.int64 else np.int64),
        "cursor": np.int64(int(host(state["cursor"]))),
        "step": np.int64(int(host(state["step"]))),
    }
    folder = os.path.join(ctx.workdir, "another-form")
    os.makedirs(folder)
    path, before = os.path.join(folder, "checkpoint.npz"), fingerprint(other)
    error = attempt(lambda: ctx.impl.save(path, other, contract))[1]
    changed = changed_inputs([before], [fingerprint(other)], ["state"])
    expect(
        not changed,
        "the state as the caller passed it",
        changed,
        f"save changed the state it was given ({'; '.join(changed)}), a state whose cursor and step are NumPy "
        f"integers and whose order is {other['order'].dtype}, as another sampler's may be -> read the fields into "
        "variables of your own, never assign into the state (a caller keeps using it)"
        + mark("save-inputs-intact", cause="save-changes-its-inputs"),
    )
    restored, refused = _restored(ctx, path, contract) if not error else ({}, "")
    expect(
        not error and not refused and not _differ(restored, other),
        "every value as saved",
        {"save": error} if error else {"restore": refused} if refused else {"differ": _differ(restored, other)},
        f"a state whose cursor and step are NumPy integers and whose order is {other['order'].dtype}, as another "
        "sampler's may be, was not saved and restored whole -> take any integer form of a field a state may hold"
        + mark("exact-resume"),
    )


def restore_returns_every_field(ctx):
    """restore gives back every field exactly, weights and momentum replicated on the mesh."""
    path, state, contract = _saved(ctx, "restore")
    restored = _restore(ctx, path, contract)
    causes = {
        "momentum": "restored momentum is zeros where the saved one is not (reset to zeros?) -> the checkpoint must "
        "carry momentum",
        "cursor": "restore reset the cursor -> the sampler position comes from the checkpoint; a reset cursor "
        "replays examples this epoch already consumed" + mark(cause="restore-resets-cursor"),
        "key": "restore changed the key -> the next epoch would draw another permutation"
        + mark(cause="restore-changes-key"),
    }
    for name in FIELDS:
        want, got = np.asarray(state[name]), np.asarray(restored.get(name))
        expect(np.array_equal(want, got), want, got, _why_restored_differs(name, want, got, causes))
    expect(*dtypes_verdict(state, restored, "restore of the saved state"))
    for name in ("weights", "momentum"):
        wrong = sharding_of(restored[name], ctx.mesh, P())
        expect(
            wrong is None,
            "NamedSharding(mesh, P())",
            wrong,
            f"rebuild the replicated placement of {name}" + known_causes.placement(wrong),
        )
    _restores_written_another_way(ctx, path, state, contract)
    left: dict = {}
    _note_left_open(
        ctx, "restore", os.path.dirname(path), "a restore of the saved checkpoint", left, path, contract, ctx.mesh
    )
    _none_left_open("restore", left, cause=None)
    _called_from_another_thread(ctx, path, state, contract)
    _restored_beside_a_running_save(ctx, state, contract)
    return (
        "every field as saved and in the saved state's dtypes, also with the contract's entries in another order, "
        "from a read-only file and from another thread, beside another save's temporary, nothing left open",
        "equal",
    )


def _why_restored_differs(name: str, want: np.ndarray, got: np.ndarray, causes: dict) -> str:
    """Why restore gave back another `name` than the saved one, from what it gave: the saved values rounded to a
    narrower float, momentum reset to zeros, or the field's own known cause."""
    narrow = rounded_to(want, got) if name in ("weights", "momentum") else None
    if narrow:
        return (
            f"restored {name} is the saved {name} rounded to {narrow} -> save and restore it in the dtype the state "
            f"holds ({want.dtype}), bit for bit" + mark("exact-resume", cause="field-saved-narrow")
        )
    if name == "momentum" and got.shape == want.shape and got.any():
        return "restored momentum differs from the saved one -> give back the saved momentum, bit for bit"
    return causes.get(name, f"restore must return the saved {name}")


def _restored_beside_a_running_save(ctx, state: dict, contract: dict) -> None:
    """A save to a name holding a backslash (on POSIX a letter of a name like any other), run whole in a forked child,
    must leave exactly that name; then a restore of it, with a temporary named as the learner's save names them
    lying beside it (as a save still running in another thread would leave it, its process id, if any, a live
    one), must leave the folder as it was."""
    folder = os.path.join(ctx.workdir, "beside-a-save")
    os.makedirs(folder)
    path = os.path.join(folder, "run\\checkpoint.npz")
    seen = _whole_save(ctx, folder + ".json", path, state, contract)
    found = sorted(os.listdir(folder))
    expect(
        found == [os.path.basename(path)],
        [os.path.basename(path)],
        {"save": seen.get("first"), "folder holds": found},
        "save of a valid state at a name holding a backslash ('run\\\\checkpoint.npz') left another name: on "
        "POSIX a backslash is a letter of a file name, not a separator; a save that turns it into '/' (or "
        "normalises the path in any way) writes into a folder 'run' -> use the path exactly as given"
        + mark("exact-path"),
    )
    published = interrupt.targets(seen.get("operations", []), interrupt.PUBLISH)
    running = next((name for name in published if name != os.path.basename(path)), None)
    if running and seen.get("pid"):
        running = running.replace(str(seen["pid"]), str(seen["parent"]))
    if running:
        with open(os.path.join(folder, running), "wb") as handle:
            handle.write(b"the part file of a save still running")
    before = arguments.disk(path)
    restored, error = _restored(ctx, path, contract)
    moved = arguments.changed(before, arguments.disk(path))
    expect(
        not error,
        "every field as saved",
        error,
        "restore refused the checkpoint its own save wrote at a name holding a backslash ('run\\\\checkpoint.npz'): "
        "on POSIX a backslash is a letter of a file name; a restore that turns it into '/' (or normalises the path "
        "in any way) reads run/checkpoint.npz, another name -> read the path exactly as given" + mark("exact-resume"),
    )
    expect(
        not moved and not _differ(restored, state),
        "every field as saved, the folder as it was",
        {"changed on disk": moved, "fields that differ": _differ(restored, state)},
        "restore of a valid checkpoint"
        + (
            f", beside {running!r} (a temporary named as this save names its own, as a save still running in another "
            "thread of a live process leaves it),"
            if running
            else ""
        )
        + f" changed {moved} -> restore only reads: "
        + (
            "it changes nothing of the checkpoint it reads, not its bytes, nor its modification time or permissions "
            "(no os.utime, os.chmod or write: a retention policy's bookkeeping belongs elsewhere)"
            + mark("restore-inputs-intact", cause="restore-touches-the-file")
            if os.path.basename(path) in moved
            else "it removes no temporary (another thread's save is writing it; only a save clears temporaries, and "
            "only those whose writer process is gone)" + mark("restore-inputs-intact")
        ),
    )


def _called_from_another_thread(ctx, path: str, state: dict, contract: dict) -> None:
    """save, then restore of the checkpoint saved above, each called from a thread that is not the main one (as a
    background checkpointer calls them): the save must write its file and the restore give back every field."""
    other = os.path.join(ctx.workdir, "thread", "checkpoint.npz")
    os.makedirs(os.path.dirname(other))
    saved = probe("in_a_thread", ctx.impl.save, other, state, contract)
    expect(
        "error" not in saved and os.path.isfile(other),
        "a save called from another thread writes its checkpoint",
        saved.get("error", "no file at the path"),
        f"save called from a thread other than the main one raised {saved.get('error', 'nothing but wrote no file')}"
        " -> background checkpointing calls save from a thread of its own: set no signal handler (signal.signal "
        "works only in the main thread) and keep no state that only the main thread may touch" + mark("exact-path"),
    )
    restored = probe("in_a_thread", ctx.impl.restore, path, contract, ctx.mesh)
    got = restored.get("value") if isinstance(restored.get("value"), dict) else {}
    differ = [name for name in FIELDS if name not in got or not np.array_equal(host(got[name]), host(state[name]))]
    expect(
        "error" not in restored and not differ,
        "a restore called from another thread gives back every field",
        restored.get("error", f"fields that differ: {differ}"),
        "restore called from a thread other than the main one "
        + (f"raised {restored['error']}" if "error" in restored else f"gave back other {differ}")
        + " -> a restore must work in any thread: set no signal handler or alarm (signal.signal and signal.alarm "
        "work only in the main thread); bound a read by the file's size instead" + mark("exact-resume"),
    )


def _restores_written_another_way(ctx, path: str, state: dict, contract) -> None:
    """The same valid checkpoint restored from inputs written another way: an expected contract holding the same
    entries in another key order (a dict is its entries, rule:contract-first), and the file on a file system that
    refuses every write (a valid checkpoint is still one there, rule:exact-resume)."""
    if isinstance(contract, dict) and len(contract) > 1:
        reordered = dict(reversed(list(contract.items())))
        restored, error = _restored(ctx, path, reordered)
        expect(
            not error and not _differ(restored, state),
            "every field as saved: the expected contract has the same entries, only in another key order",
            error or {"fields that differ": _differ(restored, state)},
            f"restore refused its own checkpoint when the expected contract held the same entries in another key "
            f"order ({list(reordered)[:3]}... instead of {list(contract)[:3]}...): equal contracts were compared as "
            "text (json.dumps keeps insertion order) -> compare the saved contract with the expected one entry by "
            "entry (parse the saved JSON and compare the two dicts, or dump both with sort_keys=True)"
            + mark("contract-first"),
        )
    seen = probe("read_only_restore", ctx.impl.restore, path, contract, ctx.mesh)
    restored, error, tried = seen.get("state") or {}, seen.get("error", ""), seen.get("tried", [])
    expect(
        not error and not _differ(restored, state),
        "every field as saved, from a checkpoint whose file system refuses writes (mounted read-only)",
        {"raised": error, "write attempts refused or write permission denied": tried[:5]}
        if error
        else {"fields that differ": _differ(restored, state)},
        (
            f"restore asked whether it may write the checkpoint ({', '.join(tried[:3])}), which a read-only file "
            "system answers no for every user (and a mode-0444 file for every user but root), and refused a valid "
            "checkpoint -> restore only reads: ask only what reading needs (a file that can be opened 'rb' can be "
            "restored), never whether it may be written"
            if tried and all(t.startswith("os.access") for t in tried)
            else f"restore tried to write where the checkpoint lies ({', '.join(tried[:3])}) and, refused as on a "
            "read-only file system, refused a valid checkpoint -> restore only reads: open the file 'rb' (np.load "
            "does), and take no write lock, lock file or temporary there"
            if tried
            else "restore gave back other fields when the checkpoint's folder was read-only"
        )
        + mark("exact-resume"),
    )


def _replay_verdict(control: dict, resumed: dict, where: str, restored: dict | None = None, saved: dict | None = None):
    """Fail unless the resumed run equals the control. With the `restored` state and the `saved` one, a divergence
    after an exact restore is not blamed on restore: both runs started from the same six fields."""
    comparison = replay.compare(control, resumed)
    try:
        replay.check_recovery(comparison, WEIGHT_TOLERANCE)
    except replay.ReplayMismatchError as exc:
        first = replay.first_divergence(control, resumed) or {}
        cause = str(exc)
        if restored is not None and saved is not None and not _differ(restored, saved):
            cause = (
                "restore gave back all six saved fields exactly, so restore is not at fault: from equal states the "
                "resumed run and the uninterrupted one computed differently -> a function keeps something between "
                "calls (a module-level cache of batches, buffers, steps or states), so its result depends on the "
                "calls made before it in that interpreter; every call must depend on its arguments alone"
                + mark("exact-resume")
            )
        expect(
            False,
            "no difference from the uninterrupted run",
            {"first divergence": first, **comparison},
            f"{where}, first visible at step {first.get('step')} in {first.get('fields')}: {cause}",
        )
    return f"{comparison['steps_compared']} steps equal to the uninterrupted run", plain(comparison)


def resume_continues_the_same_run(ctx):
    """Restored in this interpreter, the run continues exactly as the uninterrupted one (> 2 epochs)."""
    path, saved, contract = _saved(ctx, "resume")
    _, step = _trained(ctx)
    restored = _restore(ctx, path, contract)
    given = snapshot(restored)
    resumed = replay.run(restored, ctx.data, ctx.batch_size, _resume_steps(ctx), ctx.mesh, step, ctx.impl.transition)
    return _replay_verdict(_control(ctx), resumed, "resumed in this interpreter", given, snapshot(saved))


def fresh_process_resume(ctx):
    """A fresh interpreter restores the checkpoint and continues exactly as the uninterrupted run."""
    path, saved, written = _saved(ctx, "fresh")
    steps = _resume_steps(ctx)
    with fresh_implementation(ctx) as fresh:
        contract = fresh.contract(ctx.data, _config(ctx))
        try:
            state = fresh.restore(path, contract, ctx.mesh)
        except NotImplementedError:
            raise
        except Exception as exc:
            raise CheckFailed(
                "the checkpoint restored in a fresh interpreter",
                wire.learner_error(exc),
                f"restore in a fresh interpreter raised {type(exc).__name__} at {raised_where(exc)}: "
                + _fresh_refusal(ctx, exc, path, contract, saved, written),
            ) from None
        restored = snapshot(state)
        resumed = replay.run(
            state, ctx.data, ctx.batch_size, steps, ctx.mesh, fresh.make_step(ctx.mesh), fresh.transition
        )
    return _replay_verdict(_control(ctx), resumed, "resumed in a fresh interpreter", restored, snapshot(saved))


def _fresh_refusal(ctx, exc, path: str, contract: dict, saved: dict, written: dict) -> str:
    """Why a fresh interpreter's restore refused the checkpoint this one saved: the contract each interpreter
    computed first, then the file (read here), and restore only when both are right."""
    here, there = (json.loads(json.dumps(c)) for c in (written, contract))
    if here != there:
        return (
            f"the contract computed in the fresh interpreter differs from this one's ({_contract_change(there, here)})"
            " -> build the contract from the data's bytes and the configuration only (no hash() of a str, id(), "
            "time or path)" + mark("contract-json")
        )
    found = _file_fault(ctx, path, written, saved)
    if found:
        return found
    text = (
        "both interpreters compute the same contract and the file holds it and every field, so the fault is "
        "restore's: it refuses a valid checkpoint its own save wrote"
    )
    if isinstance(exc, errors.ContractMismatchError):  # only a refused comparison speaks of the contract's form
        return text + (
            " as another experiment: a contract read back from JSON has lists for tuples and str keys -> compare "
            "both in the same plain-JSON form" + mark("contract-first")
        )
    return text + " -> restore must accept every checkpoint save writes" + mark("exact-resume")


def save_never_overwrites(ctx):
    """save refuses a path that exists and leaves its bytes untouched."""
    state, _ = _trained(ctx)
    folder = os.path.join(ctx.workdir, "exists")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "checkpoint")  # no .npz: a save that adds one never meets the existing name
    earlier = b"an earlier checkpoint"
    with open(path, "wb") as handle:
        handle.write(earlier)
    raised, what = _refused(lambda: ctx.impl.save(path, state, ctx.impl.contract(ctx.data, _config(ctx))))
    left: dict = {}
    _note_left_open(ctx, "save", folder, "a save to a path that exists", left)
    with open(path, "rb") as handle:
        kept = handle.read() == earlier
    added = sorted(set(os.listdir(folder)) - {"checkpoint"})
    expect(
        raised and kept,
        "CheckpointExistsError, the existing file untouched",
        f"{what}; existing file {'untouched' if kept else 'replaced'}"
        + (f"; new in the folder: {added}" if added else ""),
        (
            f"save accepted a path that exists and wrote {added} beside it instead -> write at exactly the path "
            "given (no .npz added), and refuse it when it exists"
            + mark("exact-path", "never-overwrite", cause="wrote-beside")
            if kept and not raised and added
            else "save overwrote an existing checkpoint -> refuse an existing path (checkpoints are never "
            "overwritten; use a new path)" + mark("never-overwrite", cause="overwrites")
        ),
    )
    _none_left_open("save", left)
    return expect(
        what.startswith("CheckpointExistsError"),
        "CheckpointExistsError, the existing file untouched",
        f"{what}; existing file untouched",
        "save refused the existing path, but not with the course's error, so a caller cannot tell an existing "
        "checkpoint from a failed write -> raise errors.CheckpointExistsError for a path that exists"
        + mark("never-overwrite", cause="refusal-not-the-courses"),
    )


def save_leaves_only_the_final_file(ctx):
    """After save, the folder holds the checkpoint and nothing else (no temporary leftovers)."""
    path, _, _ = _saved(ctx, "tidy", "checkpoint")  # no .npz, so a save that appends one is seen
    found = sorted(os.listdir(os.path.dirname(path)))
    expect(
        os.path.isfile(path),
        ["checkpoint"],
        found,
        f"no file at the path given ({os.path.basename(path)}), so there is no checkpoint to be the only file: "
        + (
            "np.savez appends .npz to a file *name* that lacks it -> write at exactly the path given (hand np.savez "
            "an open file)"
            if os.path.exists(path + ".npz")
            else "save returned before any file was there -> write, fsync and publish the checkpoint at exactly the "
            "path given inside save, before it returns"
        )
        + mark("exact-path"),
    )
    expect(
        found == ["checkpoint"],
        ["checkpoint"],
        found,
        "write a temporary file in the same folder, then rename it into place and remove leftovers"
        + mark(cause="leftovers"),
    )
    state, _ = _trained(ctx)
    left: dict = {}
    again = (path + "-again", state, ctx.impl.contract(ctx.data, _config(ctx)))
    _note_left_open(ctx, "save", os.path.dirname(path), "a second save into the folder", left, *again)
    _none_left_open("save", left, cause=None)
    return ["checkpoint"], found


def _note_left_open(ctx, function: str, folder: str, what: str, into: dict, *call) -> None:
    """Into `into`[what]: the paths at or under `folder` that descriptors of the learner's process still name after
    its `function` returned, refused or raised: the call just made (into a folder made for it, where nothing else
    opens files), or, given its arguments `call`, this call of it, made here (descriptors open before it left out)."""
    if call:
        seen = probe("left_open", getattr(ctx.impl, function), folder, *call)
        left, what = seen["left"], what + (f" (it raised {seen['error']})" if seen["error"] else "")
    else:
        left = probe("open_under", getattr(ctx.impl, function), folder)
    if left:
        into[what] = left


def _none_left_open(function: str, left: dict, cause: str | None = "left-open-on-error") -> None:
    """Fail naming every call of `function` (what -> the paths its descriptors still name) that left one open;
    `cause` names the mistake (the default: a descriptor left open on a way out, a refusal or an error)."""
    expect(
        not left,
        f"nothing left open by {function}, whether it returns, refuses or raises",
        left,
        f"{function} left descriptors open after {len(left)} call(s): "
        + "; ".join(f"{what}: {paths[:2]} still open" for what, paths in left.items())
        + f" -> each leaks a descriptor, and after about a thousand such calls (the open-files limit) every "
        f"{function} fails: close every file and folder {function} opens on every way out, the refusals and the "
        "errors included (a with block, or os.close in a finally; check what makes it refuse before opening anything)"
        + mark("new-temp-name" if function == "save" else "exact-resume", cause=cause),
    )


def restore_refuses_another_experiment(ctx):
    """restore raises for a checkpoint of another batch size or other data, and refuses its own checkpoint given an
    expected contract one entry of which is moved by the least its type allows (`nearest_contracts`)."""
    path, _, saved = _saved(ctx, "other")
    features = ctx.data.features.copy()
    features[3, 2] -= 1.0
    others = {
        f"batch size {ctx.batch_size + 3}": ctx.impl.contract(ctx.data, _config(ctx, batch_size=ctx.batch_size + 3)),
        "changed data": ctx.impl.contract(Dataset(features, ctx.data.targets), _config(ctx)),
    }
    own = ctx.impl.contract(ctx.data, _config(ctx))
    for what, contract in others.items():
        raised, got = _refused(lambda contract=contract: _restore(ctx, path, contract))
        expect(raised, "an error naming the mismatch", got, _accepted_other(ctx, what, contract, own))
    accepted = {}
    for what, contract in nearest_contracts(saved).items():
        try:
            _restore(ctx, path, contract)
        except (NotImplementedError, CheckFailed):
            raise
        except OTHER_EXPERIMENT:  # a moved entry may leave the contract malformed (num_features != its shape's)
            continue
        except Exception as exc:
            accepted[what] = wire.learner_error(exc, 200)
        else:
            accepted[what] = "accepted (no error)"
    expect(
        not accepted,
        {what: "ContractMismatchError (or CorruptCheckpointError: a malformed contract)" for what in accepted},
        accepted,
        f"restore of its own checkpoint, given the contract it was saved with but for one entry moved by the least "
        f"that entry's type allows, did not refuse it as another experiment's: {', '.join(accepted)} -> two "
        "contracts that differ in any entry, by however little, are two experiments: compare every entry with ==, "
        "never within a tolerance (math.isclose, np.allclose, rounding) or in part (a prefix, a length)"
        + mark("contract-first", cause="contract-compared-loosely"),
    )
    _refuses_other_structures(ctx, path, saved)
    return (
        "refused, also given its own contract with one entry moved by the least its type allows, or with its members "
        "changed (one missing, one more, one renamed, one of another type, none), and a contract so changed saved",
        "refused",
    )


EXTRA_MEMBER = "an entry the run did not pin"  # the name of a member no contract of the course's has


def _retyped(value):
    """`value` held in another JSON type that == never equates with it: text in a list, anything else as its JSON
    text (an int as a float, or a bool as an int, would be == to it in Python, so neither is used)."""
    return [value] if isinstance(value, str) else json.dumps(value)


def contract_structures(contract: dict) -> dict:
    """What -> (kind, member, `contract` with its members changed): none at all, one more, and each one missing,
    renamed (its value kept under another name) and held in another type. Every one is another experiment's
    contract: the course's rule compares the two contracts exactly, member by member, so a member on one side only
    is a difference."""
    found = {
        "no member at all": ("none", "", {}),
        f"one member more ({EXTRA_MEMBER!r})": ("one more", EXTRA_MEMBER, {**contract, EXTRA_MEMBER: "x"}),
    }
    for key, value in contract.items():
        found[f"{key} missing"] = ("missing", key, {k: v for k, v in contract.items() if k != key})
        renamed = {(f"{k}_" if k == key else k): v for k, v in contract.items()}
        found[f"{key} renamed {key}_"] = ("renamed", key, renamed)
        retyped = {**contract, key: _retyped(value)}
        found[f"{key} as {type(_retyped(value)).__name__}"] = ("of another type", key, retyped)
    return found


def _by_kind(wrong: dict, changes: dict, prefix: str) -> list[str]:
    """'a member missing (seed, decay)'-like phrases: the changes `wrong` holds under `prefix`, grouped by kind."""
    kinds: dict = {}
    for what in wrong:
        if what.startswith(prefix):
            kind, key, _ = changes[what.removeprefix(prefix)]
            kinds.setdefault(kind, []).append(key)
    phrases = {"none": "no member at all", "one more": "one member more"}
    return [phrases.get(kind) or f"a member {kind} ({', '.join(keys)})" for kind, keys in kinds.items()]


def _not_refused(call) -> str | None:
    """None when `call` refused as another experiment's (a course error of OTHER_EXPERIMENT), else what it did."""
    try:
        call()
    except (NotImplementedError, CheckFailed):
        raise
    except OTHER_EXPERIMENT:
        return None
    except Exception as exc:
        return wire.learner_error(exc, 200)
    return "accepted (no error)"


EXPECTED, SAVED = "expected contract with ", "a checkpoint saved with a contract with "


def _refuses_other_structures(ctx, path: str, saved: dict) -> None:
    """restore refuses its own checkpoint given `saved` (the contract it was saved with) with its members changed
    (`contract_structures`), and refuses, given `saved`, a checkpoint its own save wrote with a contract so changed
    (one of each kind of change, those save accepts: a save may refuse a contract not of contract()'s form). An
    integrity checksum over the saved contract refuses a contract edited inside the file, whatever restore compares;
    only these show a comparison of some members (the expected contract's, or those both have). Given a changed
    expected contract, any error is a refusal (the rules name none for a caller's contract that contract() never
    gives); a changed saved one is refused with the course's errors (rule:contract-first)."""
    if not isinstance(saved, dict):
        return
    state, _ = _trained(ctx)
    changes = contract_structures(saved)
    wrong = {}
    for what, (_, _, changed) in changes.items():  # a caller's contract that contract() never gives: the rules name no
        # error for it (restore may read the members it needs and fail there), so only an acceptance is wrong
        found = _not_refused(lambda changed=changed: _restore(ctx, path, changed))
        if found and found.startswith("accepted"):
            wrong[f"{EXPECTED}{what}"] = found
    first = min(saved, default="")  # one member's three changes, and the member more
    kinds = [f"one member more ({EXTRA_MEMBER!r})", *(what for what in changes if what.startswith(f"{first} "))]
    for number, what in enumerate(kinds):
        other = os.path.join(ctx.workdir, "other-structure", str(number), "checkpoint.npz")
        os.makedirs(os.path.dirname(other))
        try:
            ctx.impl.save(other, state, changes[what][2])
        except (NotImplementedError, CheckFailed):
            raise
        except Exception:  # save may refuse a contract that is not of contract()'s form: nothing saved to restore
            continue
        found = _not_refused(lambda other=other: _restore(ctx, other, saved))
        if found:
            wrong[f"{SAVED}{what}"] = found
    left: dict = {}
    _note_left_open(ctx, "restore", os.path.dirname(path), "the restores of another structure's contract", left)
    expect(
        not wrong,
        {
            what: "an error (ContractMismatchError, or CorruptCheckpointError: a malformed contract)"
            if what.startswith(SAVED)
            else "an error"
            for what in wrong
        },
        wrong,
        "restore did not refuse a contract whose members differ from the saved one's: "
        + "; ".join(
            f"{side} {', '.join(found)}"
            for side, found in (
                ("its own checkpoint, given the contract it was saved with but", _by_kind(wrong, changes, EXPECTED)),
                ("given the run's contract, a checkpoint its save wrote with", _by_kind(wrong, changes, SAVED)),
            )
            if found
        )
        + " -> two contracts are one experiment only when they hold the same members with equal values: compare "
        "every member of either one (the union of both contracts' keys, or the two dicts with ==), "
        "never only the expected contract's members or only those both have; a member missing on one side, one more, "
        "one renamed or one of another type is another experiment's contract"
        + mark("contract-first", cause="contract-compared-in-part"),
    )
    _none_left_open("restore", left)


NEAREST_LIMIT = 16  # entries of a contract moved one at a time (a contract of a few scalars and two shapes has ~12)


def nearest_contracts(contract: dict) -> dict:
    """What -> `contract` with one entry (nested ones included) moved by the least its type allows: a float to the
    next float64 up, an integer by one, text by its last character. Every one is another experiment's contract."""
    found = {}
    for where, value in leaves(contract):
        if isinstance(value, bool):
            continue
        if isinstance(value, float) and np.isfinite(value):
            moved = float(np.nextafter(value, np.inf))
            how = f"{value!r} -> the next float64 {moved!r}"
        elif isinstance(value, int):
            moved, how = value + 1, f"{value} -> {value + 1}"
        elif isinstance(value, str) and value:
            moved = value[:-1] + ("1" if value[-1] == "0" else "0")
            how = "its last character changed"
        else:
            continue
        found[f"{'/'.join(map(str, where))}: {how}"] = _replaced(contract, where, moved)
        if len(found) == NEAREST_LIMIT:
            break
    return found


def _replaced(value, where: tuple, moved):
    """A copy of nested dicts, lists and tuples `value` with the entry at `where` replaced by `moved`."""
    if not where:
        return moved
    head, rest = where[0], where[1:]
    if isinstance(value, dict):
        return {key: _replaced(item, rest, moved) if key == head else item for key, item in value.items()}
    items = [_replaced(item, rest, moved) if index == head else item for index, item in enumerate(value)]
    return tuple(items) if isinstance(value, tuple) else items


def _accepted_other(ctx, what: str, theirs: dict, own: dict) -> str:
    """Why restore accepted another experiment's checkpoint: the inputs it was given judged first. When the learner's
    contract gives the other experiment the same contract as this one, restore had nothing to tell apart."""
    if json.loads(json.dumps(theirs)) == json.loads(json.dumps(own)):
        return (
            f"restore accepted a checkpoint of a different experiment ({what}), but restore is not at fault: the "
            f"contract function gives that experiment the same contract as this one, so no comparison can tell them "
            "apart -> the contract must change with every byte of the data, the shapes, the seed, the batch size, "
            "the optimiser and the device count" + mark("contract-pins") + see(ctx, "contract_pins_the_experiment")
        )
    return (
        f"restore accepted a checkpoint of a different experiment ({what}), whose contract differs from the saved "
        "one -> compare the saved contract with the expected one before accepting anything (a changed batch size is "
        "a new experiment)" + mark("contract-first", cause="contract-not-compared")
    )


def _cursor(value: int):
    def change(arrays):
        kind = np.asarray(arrays["cursor"]).dtype if value >= 0 else damage.signed(arrays["cursor"])
        arrays["cursor"] = np.asarray(value, kind)

    return change


def invalid_arguments_are_refused(ctx):
    """Every path argument a rule says save or restore must refuse is refused with that rule's error, disk untouched."""
    path, state, contract = _saved(ctx, "arguments-source")
    with open(path, "rb") as handle:
        checkpoint = handle.read()
    wrong, tried, left = {}, [], {"save": {}, "restore": {}}
    for number, argument in enumerate(arguments.ARGUMENTS):
        name = arguments.FILE_NAMES.get(argument.layout, "checkpoint.npz")
        target = os.path.join(ctx.workdir, f"arguments-{number}", name)
        arguments.lay_out(argument.layout, target, checkpoint)
        error = arguments.error_of(argument.rule)
        if argument.function == "save":
            call = lambda target=target: ctx.impl.save(target, state, contract)  # noqa: E731
        else:
            call = lambda target=target: ctx.impl.restore(target, contract, ctx.mesh)  # noqa: E731
        what = arguments.outcome(call, error, target)
        _note_left_open(ctx, argument.function, os.path.dirname(target), argument.name, left[argument.function])
        tried.append(f"{argument.function}: {argument.name} -> {error.__name__}")
        if what is not None:
            wrong[f"{argument.function}: {argument.name}"] = (argument.rule, error.__name__, what)
    fixes = {
        "save": "refuse every existing name, a file of any size, a folder or a link (one that leads nowhere included: "
        "os.path.lexists, not os.path.exists), with errors.CheckpointExistsError before writing anything, and never "
        "remove it",
        "restore": "turn every error of reading the path (a missing name, a folder, a link that leads nowhere, a cut "
        "file: OSError included) into errors.CorruptCheckpointError"
        + (
            ", and read the path given, never a name beside it or inside it (the path with .npz added or removed, "
            "or a checkpoint.npz in the folder at the path, is another file)"
            if any(".npz" in case for case in wrong)
            else ""
        )
        + (
            f", and read the path as a name, never as a pattern ({arguments.PATTERN!r} does not exist; glob and "
            "fnmatch read it as checkpoint-<anything>.npz and find checkpoint-2.npz): '*', '?' and '[' are letters "
            "of a file name"
            if any("pattern" in case for case in wrong)
            else ""
        )
        + (
            ", and read the path as given, never tidied: a trailing separator names a folder, and on POSIX a "
            "backslash is a letter of a name (rstrip, os.path.normpath or replacing '\\\\' by '/' reads another file)"
            if any("separator" in case or "backslash" in case for case in wrong)
            else ""
        ),
    }
    functions = sorted({case.split(":")[0] for case in wrong})
    verdict = expect(
        not wrong,
        tried,
        {case: what for case, (_, _, what) in wrong.items()},
        f"{len(wrong)} invalid argument(s) not refused as the rules say: "
        + "; ".join(f"{case}: {what}" for case, (_, _, what) in wrong.items())
        + " -> "
        + "; ".join(f"{function}: {fixes[function]}" for function in functions)
        + "".join(sorted({f" {{rule:{rule}}}" for rule, _, _ in wrong.values()})),
    )
    for function, calls in left.items():
        _none_left_open(function, calls)
    return verdict


# no array holds it: np.asarray (and so np.savez) raises ValueError; each case gets a copy (a save that changes its
# list in place changes the caller's, which is this process's: never the next case's or the next run's)
RAGGED = [[1.0], [1.0, 2.0]]


def failing_saves(state: dict, contract) -> dict:
    """What -> (file path relative to a case folder, state, contract) of a save that may fail: every field
    missing, every field a str or a ragged list (no array holds one), a contract JSON cannot write, a name
    longer than a folder may hold, a folder that does not exist, a path ending in a separator. Each can fail after a
    temporary file exists, when it was made too early."""
    cases = {}
    for name in FIELDS:
        cases[f"a state without {name}"] = ("checkpoint.npz", {k: v for k, v in state.items() if k != name}, contract)
        cases[f"a state whose {name} is a str"] = ("checkpoint.npz", {**state, name: "not a number"}, contract)
        ragged = [list(row) for row in RAGGED]
        cases[f"a state whose {name} is a ragged list"] = ("checkpoint.npz", {**state, name: ragged}, contract)
    cases["a contract holding a set"] = ("checkpoint.npz", state, {**contract, "seed": {1, 2}})
    cases["a file name of 300 characters"] = ("c" * 296 + ".npz", state, contract)
    cases["a folder that does not exist"] = (os.path.join("missing", "checkpoint.npz"), state, contract)
    # a path ending in a separator names a folder, which a checkpoint file cannot be: stripping it writes another name
    cases["a path ending in a separator"] = ("checkpoint" + os.sep, state, contract)
    # two conditions at once: a save that makes the missing folder before it checks the state leaves it behind
    without_step = {k: v for k, v in state.items() if k != "step"}
    cases["a folder that does not exist, and a state without step"] = (
        os.path.join("missing", "checkpoint.npz"),
        without_step,
        contract,
    )
    cases["a folder that does not exist, and a contract holding a set"] = (
        os.path.join("missing", "checkpoint.npz"),
        state,
        {**contract, "seed": {1, 2}},
    )
    return cases


def _with_an_earlier_file(folder: str) -> str:
    """`folder`, made new with one file in it that a save there must leave as it is."""
    os.makedirs(folder)
    with open(os.path.join(folder, "earlier.txt"), "w") as handle:
        handle.write("a file the save must leave as it is\n")
    return folder


def save_errors_leave_the_folder_as_it_was(ctx):
    """A save that raises, whatever its input, leaves its folder as it was (every name, kind and byte); one that
    returns has added the checkpoint alone. Observed by listing the folder before and after each call."""
    state, _ = _trained(ctx)
    contract = ctx.impl.contract(ctx.data, _config(ctx))
    wrong, tried, left = {}, [], {}
    for number, (what, (name, given, given_contract)) in enumerate(failing_saves(state, contract).items()):
        folder = _with_an_earlier_file(os.path.join(ctx.workdir, "save-errors", str(number)))
        path = os.path.join(folder, name)
        observed = os.path.join(folder, "observed")  # arguments.disk lists the folder of the path it is given
        before = arguments.disk(observed)
        try:
            ctx.impl.save(path, given, given_contract)
        except NotImplementedError:
            raise
        except Exception as exc:
            _note_left_open(ctx, "save", folder, what, left)
            moved = arguments.changed(before, arguments.disk(observed))
            tried.append(f"{what}: {type(exc).__name__}")
            if moved:
                wrong[what] = f"raised {type(exc).__name__} and left {moved[:3]} behind"
            continue
        _note_left_open(ctx, "save", folder, what, left)
        tried.append(f"{what}: saved")
        if not os.path.lexists(path):  # a save that reports success must have written the path it was given
            wrong[what] = f"returned, but left no file at the path given ({name[:40]})"
            continue
        allowed = {os.path.relpath(path, folder)} | {os.path.relpath(p, folder) for p in _ancestors(path, folder)}
        extra = [m for m in arguments.changed(before, arguments.disk(observed)) if m not in allowed]
        if extra:
            wrong[what] = f"saved, and left {extra[:3]} beside the checkpoint"
    wrong.update(_failed_publishes(ctx, state, contract, tried, left))
    verdict = expect(
        not wrong,
        "every save that raises leaves its folder as it was; one that returns adds the checkpoint alone",
        wrong,
        f"{len(wrong)} save(s) changed their folder: "
        + "; ".join(f"{what}: {found}" for what, found in wrong.items())
        + " -> check the state and contract and build the bytes before creating the temporary file"
        + (
            " or the missing folder (a folder made for a save that then refuses is left behind)"
            if any("does not exist," in what for what in wrong)
            else ""
        )
        + (
            "; note which folders of the path were missing before making them, and when a later write fails, "
            "remove those (deepest first, each only if empty), never one that was there"
            if any(what.endswith(")") and "fails" in what for what in wrong)
            else ""
        )
        + ", and remove the temporary in a finally (or except) block on every error, the failed publish included"
        + (
            "; a path ending in a separator names a folder, where no checkpoint file can be: a save that strips the "
            "separator (rstrip, os.path.normpath) writes another name -> use the path exactly as given, so the "
            "publish fails" + mark("exact-path")
            if "a path ending in a separator" in wrong
            else ""
        )
        + (
            " (Ctrl-C raises KeyboardInterrupt, and a process told to end another BaseException, as a SIGTERM "
            "handler's sys.exit raises SystemExit: `except Exception` lets them through, and a list of the ones you "
            "thought of lets the others through: clean up in finally or except BaseException)"
            + mark(cause="cleanup-misses-base-exceptions")
            if _interrupts_only(wrong)
            else ""
        )
        + (
            "; a folder this save made may meanwhile hold another saver's files: remove it only if empty (os.rmdir), "
            "never with everything in it (shutil.rmtree)"
            if any("another saver's file" in f for f in wrong.values())
            else ""
        )
        + (
            mark(cause="removes-what-it-found")
            if any("which were there before" in f or "another saver's file" in f for f in wrong.values())
            else ""
        )
        + mark("new-temp-name"),
    )
    _none_left_open("save", left)
    return verdict


def _interrupts_only(wrong: dict) -> bool:
    """Whether a save interrupted at its first write (Ctrl-C, the process told to end) changed its folder where the
    same save failing there with an OSError left it as it was: a clean-up that runs on some exceptions only."""
    interrupted = [what for what in wrong if "KeyboardInterrupt" in what or ENDING in what]
    return any(
        f"{what.split(', and ')[0]}, and its first write fails (its write raises ENOSPC)" not in wrong
        for what in interrupted
    )


def _failed_publishes(ctx, state: dict, contract: dict, tried: list, left: dict) -> dict:
    """{case: what it left}: saves into a folder two levels below the missing one `new`, itself in an empty folder
    `found` that was there before, and into an empty folder `kept/inner` that was there before, in a forked child
    whose first write, and then whose publication (link, rename or replace), raises OSError(ENOSPC) as a full disk
    does, and whose first write is interrupted by Ctrl-C (KeyboardInterrupt) or the process told to end. A write is
    any way the save writes bytes: a file object's write, os.write, np.savez given a name or a handle. A save that
    raises must leave the tree as it was: `new` gone, `found` and `kept/inner` still there (an undo that climbs
    past the folders it made, as os.removedirs does, removes `found`); one that returns must have saved. What each
    save left open when it returned or raised goes into `left`."""
    base = os.path.join(ctx.workdir, "save-errors", "failed-write")
    layouts = {  # (folders below the case folder, how many of the first of them are there, empty, before the save)
        "a missing folder two levels deep in an empty folder that was there before": (("found", "new", "deeper"), 1),
        "an empty folder two levels deep that was there before": (("kept", "inner"), 2),
    }
    wrong = {}
    for layout, (below, there) in layouts.items():
        points = _failure_points(ctx, base, below, there, state, contract)
        for index, (point, (number, mode)) in enumerate(points.items()):
            what = f"{layout}, and {point}"
            folder = _with_an_earlier_file(os.path.join(base, f"{index}-{number}-{below[0]}"))
            os.makedirs(os.path.join(folder, *below[:there]), exist_ok=True)
            path = os.path.join(folder, *below, "checkpoint.npz")
            before = arguments.disk(os.path.join(folder, "observed"))
            outcome = _save_at(ctx, number, mode, folder + ".json", (path, state, contract))
            moved = arguments.changed(before, arguments.disk(os.path.join(folder, "observed")))
            tried.append(f"{what}: {outcome.get('first', outcome['status'])[:60]}")
            if outcome.get("left_open"):
                left[what] = outcome["left_open"]
            if outcome["status"] != "done":
                wrong[what] = f"the save's child ended {outcome['status']} after the failure"
            elif point == BESIDE_POINT:
                wrong.update(_beside_verdict(what, outcome, moved, below))
            elif outcome.get("first") != "saved" and moved:
                gone = [name for name in moved if name in {row[0] for row in before}]
                wrong[what] = f"raised {outcome['first'].split(':')[1].strip()} and " + (
                    f"removed {gone[:3]}, which were there before" if gone else f"left {moved[:3]} behind"
                )
            elif outcome.get("first") == "saved" and not os.path.lexists(path):
                wrong[what] = "returned without an error, but left no file at the path given"
    return wrong


ENDING = f"{interrupt.ProcessEnding.__name__}, a BaseException as SystemExit is"
BESIDE_POINT = (
    f"another saver writes {interrupt.BESIDE} into the folder this save made, then this save's first write fails "
    "(its write raises ENOSPC)"
)


def _beside_verdict(what: str, outcome: dict, moved: list, below: tuple) -> dict:
    """{what: the verdict} when a save that failed after another saver wrote a file into the folder it made changed
    anything but adding that file (and the folders holding it), or removed it; {} when it left exactly that."""
    other = "/".join((*below, interrupt.BESIDE))
    kept = {"/".join(below[:depth]) for depth in range(1, len(below) + 1)} | {other}
    if outcome.get("first") == "saved":
        return {}
    if other not in moved:
        return {
            what: f"raised {outcome.get('first', ': ').split(':')[1].strip()} and removed {interrupt.BESIDE}, "
            "another saver's file in a folder this save made"
        }
    extra = [name for name in moved if name not in kept]
    return {what: f"raised and left {extra[:3]} behind"} if extra else {}


def _failure_points(ctx, base: str, below: tuple, there: int, state: dict, contract: dict) -> dict:
    """{point: (operation number, interrupt mode)} of the first write (failed, and interrupted) and the first
    publication (failed) of one uninterrupted save into the layout `below` (its first `there` folders made first),
    in a folder of its own: a save that stops early in one layout (one that makes no folder stops at its open in a
    missing one) still writes in the other."""
    folder = os.path.join(base, f"listing-{below[0]}")
    os.makedirs(os.path.join(folder, *below[:there]))
    listed = _whole_save(ctx, folder + ".json", os.path.join(folder, *below, "checkpoint.npz"), state, contract)
    operations = listed.get("operations") or []
    points = {}
    for what, kinds in (
        ("its first write fails", ("write",)),
        ("its publication fails", ("link", "rename", "replace")),
    ):
        found = [n for n, op in enumerate(operations, start=1) if op.split(" ", 1)[0] in kinds]
        if found:
            kind = operations[found[0] - 1].split(" ", 1)[0]
            points[f"{what} (its {kind} raises ENOSPC)"] = found[0], "fail"
            if kind == "write":  # Ctrl-C there raises KeyboardInterrupt, which `except Exception` lets through, and
                # a process told to end another BaseException, which `except (Exception, KeyboardInterrupt)` does too
                points["Ctrl-C is pressed at its first write (KeyboardInterrupt)"] = found[0], "ctrl-c"
                points[f"the process is told to end at its first write ({ENDING})"] = found[0], "exit"
                if there < len(below):  # a folder it made, which another saver may share before the save fails
                    points[BESIDE_POINT] = found[0], interrupt.BESIDE_MODE
    return points


def _ancestors(path: str, top: str) -> list[str]:
    """The folders between `top` (excluded) and `path`."""
    found, parent = [], os.path.dirname(path)
    while os.path.abspath(parent) != os.path.abspath(top):
        found.append(parent)
        parent = os.path.dirname(parent)
    return found


def damaged_copies(path: str, changes: dict) -> dict:
    """What -> a new file in a folder `bad` beside `path`: its copy after each change (where a member holds that
    field alone), then the file cut in half and a text file named .npz."""
    folder = os.path.join(os.path.dirname(path), "bad")
    os.makedirs(folder)
    copies = {}
    for number, (what, change) in enumerate(changes.items()):
        try:
            copies[what] = faults.tampered(path, os.path.join(folder, f"{number}.npz"), change)
        except KeyError:  # no member of the learner's file holds that field alone: nothing to damage there
            continue
    copies.update(faults.unreadable(path, folder))
    return copies


def _resealed_non_finite(path: str, state: dict, contract: dict) -> dict:
    """What -> the learner's file with one weight or momentum element NaN, +inf or -inf and its integrity member (the
    course's hash, where the file holds one) recomputed over the change: valid but for the value (rule:refuse-nan).
    A file without that hash gets none here: its plain damaged copy ("non-finite weights") is the same file."""
    arrays = read_npz(path)
    members = damage.locate(arrays, snapshot(state), contract)
    folder, found = os.path.join(os.path.dirname(path), "bad"), {}
    for field in ("weights", "momentum"):
        for number, kind, values in damage.diverged(host(state[field])):
            if not values.size:
                continue
            copy = damage.resealed(arrays, members, field, values)
            if copy is not None and copy[1]:
                target = os.path.join(folder, f"resealed-{field}-{number}.npz")
                found[f"non-finite {field} ({kind}), the integrity hash recomputed"] = faults.written(target, copy[0])
    return found


def restore_refuses_damaged_checkpoints(ctx):
    """restore raises for every damage the stage 3 notebook shows, a cursor outside [0, rows] and cut files."""
    path, state, contract = _saved(ctx, "damaged")
    located = damage.locate(_members(path), snapshot(state), contract)  # the members, whatever their names
    rows = ctx.data.features.shape[0]
    damages = dict(faults.DAMAGE)
    damages.update({"cursor -1": _cursor(-1), f"cursor {rows + 1} (rows + 1)": _cursor(rows + 1)})
    changes = {what: damage.by_field(change, located) for what, change in damages.items()}
    targets = damaged_copies(path, changes)
    targets.update(_resealed_non_finite(path, state, contract))
    accepted, left = {}, {}
    for what, target in targets.items():
        raised, got = _refused(lambda target=target: _restore(ctx, target, contract))
        _note_left_open(ctx, "restore", os.path.dirname(target), what, left)
        if not raised:
            accepted[what] = got
    verdict = expect(
        not accepted,
        f"all {len(targets)} damaged files refused",
        f"accepted: {sorted(accepted)}",
        f"restore accepted {sorted(accepted)} -> after the contract, check every field: shapes, dtypes (key "
        "uint32 (2,)), finite weights and momentum, a permutation of 0..n-1, 0 <= cursor <= rows, step >= 0, and "
        "read with allow_pickle=False"
        + mark(*dict.fromkeys("refuse-nan" if "finite" in what else "validate-fields" for what in sorted(accepted))),
    )
    _none_left_open("restore", left)
    return verdict


def _two_states(ctx) -> tuple[dict, dict, dict]:
    """(the trained state, the state one transition later, the contract): two real checkpoints of one run."""
    state, step = _trained(ctx)
    state = {**state}
    later, _, _ = ctx.impl.transition(state, ctx.data, ctx.batch_size, step, ctx.mesh)
    for name in ("weights", "momentum"):  # materialise the host copies before forking
        np.asarray(state[name]), np.asarray(later[name])
    return state, later, ctx.impl.contract(ctx.data, _config(ctx))


def _holds(ctx, path: str, contract: dict, state: dict) -> str:
    """'' if the learner's own restore gives back `state` from `path`, else what it gave instead."""
    restored, error = _restored(ctx, path, contract)
    return error or (f"a checkpoint whose {_differ(restored, state)} differ" if _differ(restored, state) else "")


def _contract_change(saved: dict, given: dict) -> str:
    """How the contract a file holds differs from the one save was given, entry by entry."""
    added, dropped = sorted(set(saved) - set(given)), sorted(set(given) - set(saved))
    changed = sorted(k for k in set(saved) & set(given) if saved[k] != given[k])
    parts = [
        f"{label} {keys}" for label, keys in (("added", added), ("dropped", dropped), ("changed", changed)) if keys
    ]
    return ", ".join(parts)


def _unrestorable(ctx, path: str, contract: dict, state: dict) -> str:
    """Whose fault it is that restore does not give back `state` from the file save wrote at `path`, judged from
    the file itself: the six fields and the contract read back here (NumPy, JSON), not through the learner's code."""
    found = _file_fault(ctx, path, contract, state)
    if found:
        return found
    if not damage.json_objects(read_npz(path)):
        return (
            "the file holds every field; its contract is not JSON text this check can read, so whether save wrote "
            "it as given or restore compares it wrongly is not told apart here"
            + mark("contract-json", "exact-resume")
            + see(ctx, "restore_returns_every_field", "checkpoint_holds_every_field")
        )
    return (
        "the file holds every field and the contract as given, so the fault is restore's: it must accept every "
        "checkpoint its own save writes and give back exactly the saved fields"
        + mark("exact-resume")
        + see(ctx, "restore_returns_every_field", "resume_continues_the_same_run")
    )


def _file_fault(ctx, path: str, contract: dict, state: dict) -> str | None:
    """What is wrong with the file save wrote for `state` and `contract` (None: it holds both), read here."""
    if not os.path.exists(path):
        return (
            f"save returned, but no file is at the path it was given ({os.path.basename(path)}) -> write, fsync and "
            "publish the checkpoint inside save, before it returns" + mark("exact-path")
        ) + see(ctx, "checkpoint_holds_every_field")
    try:
        members = read_npz(path)
    except Exception as exc:
        return (
            f"the file save wrote is not an NPZ np.load(allow_pickle=False) reads ({type(exc).__name__}) -> save the "
            "six fields and the contract as arrays with np.savez"
            + mark("plain-npz")
            + see(ctx, "checkpoint_holds_every_field")
        )
    missing = [name for name in FIELDS if not damage.holding(members, host(state[name]))]
    if missing:
        return f"the file save wrote holds no member equal to the state's {missing} -> save all six fields" + see(
            ctx, "checkpoint_holds_every_field"
        )
    given = json.loads(json.dumps(contract))
    held = list(damage.json_objects(members).values())
    if held and given not in held:
        change = _contract_change(held[0], given) if len(held) == 1 else "no member equals it"
        return (
            f"the file holds every field, but not the contract save was given ({change}) -> save writes the "
            "contract exactly as given and changes nothing it is given" + mark("save-inputs-intact", "contract-json")
        )
    return None


def _interrupted_saves(ctx, mode: str):
    """Yield (number, outcome, path, state, other, contract) for a save stopped at each chosen file operation."""
    state, other, contract = _two_states(ctx)
    base = os.path.join(ctx.workdir, f"interrupt-{mode}")
    os.makedirs(os.path.join(base, "whole"))
    path = os.path.join(base, "whole", "checkpoint.npz")
    whole = _whole_save(ctx, path + ".json", path, state, contract)
    if whole["status"] != "not reached" or whole.get("first") != "saved":
        raise CheckFailed(
            f"a save with at most {interrupt.MAX_OPERATIONS} file operations",
            {k: whole.get(k) for k in ("status", "first")},
            "an uninterrupted save in a forked child did not finish (does it loop, or use JAX after fork?)",
        )
    wrong = _holds(ctx, path, contract, state)
    if wrong:
        raise CheckFailed(
            "an uninterrupted save that restore gives back",
            wrong,
            f"even an uninterrupted save gives no checkpoint its restore gives back ({wrong}): "
            + _unrestorable(ctx, path, contract, state),
        )
    for number in interrupt.stop_points(whole["operations"]):
        folder = os.path.join(base, str(number))
        os.makedirs(folder)
        path = os.path.join(folder, "checkpoint.npz")
        outcome = _save_at(ctx, number, mode, folder + ".json", (path, state, contract), (path, other, contract))
        yield number, outcome, path, state, other, contract


def _save_again(ctx, path: str, state: dict, contract: dict) -> tuple[bool, str]:
    """(saved?, how it refused): a new save to `path`, as a re-run of the command would make it."""
    try:
        ctx.impl.save(path, state, contract)
    except NotImplementedError:
        raise
    except errors.CheckpointExistsError as exc:
        return False, f"CheckpointExistsError: {exc}"[:300]
    except Exception as exc:
        return False, f"not the exists error: {type(exc).__name__}: {exc}"[:300]
    return True, ""


_DIGITS = re.compile(r"[0-9]+")


def _reused_pid_leftovers(folder: str, left: list, final: str, killed, caller) -> list[str]:
    """Plant, beside the killed save's leftovers, those a save killed in an earlier process that had the re-run's pid
    would have left (pids repeat, in a container especially): each leftover naming the killed saver's pid, renamed
    with the re-run's pid, and with each other number in its name (a counter that starts anew in every process)
    made 0..16 as well. Empty files (an empty folder for a folder). Returns the names planted."""
    if not killed or not caller or killed == caller:
        return []
    planted = []
    for name in left:
        if name == final or str(killed) not in name:
            continue
        renamed = name.replace(str(killed), str(caller))
        names = [renamed]
        for found in _DIGITS.finditer(renamed):
            if found.group() != str(caller):
                names += [renamed[: found.start()] + str(n) + renamed[found.end() :] for n in range(17)]
        for other in dict.fromkeys(names):
            target = os.path.join(folder, other)
            if other == final or os.path.lexists(target):
                continue
            if os.path.isdir(os.path.join(folder, name)):
                os.mkdir(target)
            else:
                with open(target, "x"):
                    pass
            planted.append(other)
    return planted


def _after_a_kill(ctx, number: int, at, path: str, state: dict, again: dict, contract: dict, pids=(None, None)) -> None:
    """What a save killed at `number` left, and whether a re-run's save to the same name then does the right thing.

    Where the killed save left names holding its pid, the re-run also finds what the same save killed in an earlier
    process with the re-run's own pid would have left (`pids`: the killed saver's and the re-run's)."""
    where = f"a save killed at file operation {number} ({at})"
    published = os.path.lexists(path)
    if published:
        wrong = _holds(ctx, path, contract, state)
        expect(
            not wrong,
            "no file, or a complete checkpoint equal to the state",
            wrong,
            f"{where} left an incomplete file at the final path: a reader would find a half-written checkpoint -> "
            "write a temporary file in the same folder, flush and fsync it, then publish it under the final name "
            "in one step (os.link)" + mark("new-temp-name", cause="written-in-place"),
        )
    left = sorted(os.listdir(os.path.dirname(path)))
    planted = [] if published else _reused_pid_leftovers(os.path.dirname(path), left, os.path.basename(path), *pids)
    before = fingerprint(contract)
    saved, refusal = _save_again(ctx, path, again, contract)
    _contract_kept(before, contract)
    if published:
        expect(
            not saved and refusal.startswith("CheckpointExistsError") and not _holds(ctx, path, contract, state),
            "CheckpointExistsError, the published checkpoint untouched",
            refusal or "saved over it",
            f"{where} had published its checkpoint; a new save to that name must refuse it with "
            "errors.CheckpointExistsError and leave it as it is (checkpoints are never overwritten)",
        )
        return
    repeated = [name for name in left if name != os.path.basename(path) and name in refusal]
    reused = [name for name in planted if name in refusal]
    expect(
        saved,
        "the re-run's save succeeds (the name is free)",
        {
            "left in the folder": left,
            "planted as an earlier process with this pid would leave": planted,
            "the new save": refusal,
        },
        f"{where} left {left} behind, and a new save to the same, still free name was refused -> a killed save "
        "must not block the next one: give every save a temporary name of its own (tempfile.mkstemp in the "
        "target's folder), and no lock or temporary file whose leftover refuses a later save"
        + (
            f"; the new save, in another process, drew the killed save's own temporary name {repeated[0]}: names "
            "drawn from the global random module repeat from process to process once it is seeded alike "
            "(random.seed in initial, 'seed everything') -> take names from tempfile.mkstemp, os.urandom or uuid4"
            if repeated
            else f"; the new save drew {reused[0]}, the name a save killed in an earlier process with the re-run's "
            "own pid would have left (pids repeat, in a container or sandbox especially): a name made of the pid "
            "and a counter that starts anew in every process is no new name -> take names from tempfile.mkstemp, "
            "os.urandom or uuid4, or draw another name when the one drawn is taken"
            if reused
            else ""
        )
        + mark("new-temp-name"),
    )
    wrong = _holds(ctx, path, contract, again)
    expect(
        not wrong,
        "the re-run's own checkpoint at the path",
        wrong,
        f"after {where}, the re-run's save published "
        "something else than what it was given (a stale temporary file?) -> publish the file this save wrote",
    )


def _order_fault(operations: list[str]) -> str | None:
    """What is wrong with the order of a save's file operations, or None: write, flush, fsync, then publish."""
    kinds = [label.split(" ", 1)[0] for label in operations]
    published = [i for i, kind in enumerate(kinds) if kind in interrupt.PUBLISH]
    if not published or "write" not in kinds:
        return None  # written in place, or nothing written: interrupted_save_leaves_nothing_or_a_checkpoint judges
    first = published[0]
    writes = [i for i, kind in enumerate(kinds[:first]) if kind == "write"]
    if not writes:  # every write came after the name was given: a reader could find the file empty
        return f"{operations[first]} at operation {first + 1} came before any write"
    synced = [i for i, kind in enumerate(kinds[:first]) if kind in interrupt.SYNCS and i > writes[-1]]
    if synced:
        return None
    earlier = [i for i, kind in enumerate(kinds[:first]) if kind in interrupt.SYNCS]
    return (
        f"fsync came before the last write ({operations[earlier[0]]} at operation {earlier[0] + 1}, "
        f"{operations[writes[-1]]} at {writes[-1] + 1})"
        if earlier
        else "no fsync (or fdatasync) of the file between the last write and publishing"
    )


def _fault_cause(fault: str | None) -> str | None:
    """The cause id of a publication before the bytes were on disk (`_order_fault`'s or `_sync_fault`'s words)."""
    if fault is None:
        return None
    early = fault.startswith("fsync came before") or " was fsynced when the kernel held " in fault
    return "fsync-before-last-write" if early else "no-fsync-before-publish"


def _publication(operations: list[str]) -> bool:
    """Whether one of the operations gave a written file a name (link, rename, replace, symlink): a publication."""
    return bool(interrupt.targets(operations, interrupt.PUBLISH))


def _sync_fault(sizes: list) -> str | None:
    """Whether the published file was fsynced once every byte of it had reached the kernel (None: it was).

    `sizes` holds, for each fsync, the name its descriptor points at and the bytes the kernel held for it
    then, and for the publication, the source's name and size. An fsync of the folder, or of the file
    while bytes still sat in a Python buffer (written but not flushed), leaves the published name able to
    point at an empty or cut file after a power cut.
    """
    published = [(name, size) for kind, name, size in sizes if kind in ("link", "rename", "replace")]
    if not published or published[0][1] is None:
        return None
    name, final = published[0]
    synced = [size for kind, synced_name, size in sizes if kind == "fsync" and synced_name == name]
    if final in synced:
        return None
    others = sorted({synced_name for kind, synced_name, _ in sizes if kind == "fsync" and synced_name != name})
    if synced:
        return (
            f"{name} was fsynced when the kernel held {max(synced)} of its {final} bytes "
            "(written but not flushed: fsync syncs only what reached the kernel)"
        )
    return f"{name} itself was never fsynced" + (f" (only {', '.join(others)})" if others else "")


def _collapsed(operations: list[str]) -> list[str]:
    """The operations with each run of equal ones written once, with its count ('write 3 x 66')."""
    found = []
    for label in operations:
        if found and found[-1][0] == label:
            found[-1][1] += 1
        else:
            found.append([label, 1])
    return [label if count == 1 else f"{label} x {count}" for label, count in found]


def _with_unseen_publication(seen: dict, folder: str) -> tuple[list, list, list]:
    """(operations, sizes, publications) of a save, with the publication the file system shows but no counted
    operation made (a rename through ctypes or its own system call) put where it happened: a rename of the file
    an fsync named, after the last operation before which the final name was absent."""
    operations, sizes = list(seen.get("operations", [])), list(seen.get("sizes", []))
    published, unseen = list(seen.get("published", [])), seen.get("unseen_publication")
    if unseen:
        at = unseen["position"]
        operations[at:at] = [f"rename {unseen['source']} (made by a call the checker does not count)"]
        sizes.append(("rename", unseen["source"], unseen["size"]))
        published.append(("rename", unseen["folder"], os.path.realpath(folder)))
    return operations, sizes, published


def save_syncs_before_publishing(ctx):
    """A save writes its temporary file, flushes and fsyncs it after the last write, and only then publishes it."""
    state, _, contract = _two_states(ctx)
    folder = os.path.join(ctx.workdir, "order")
    os.makedirs(folder)
    path = os.path.join(folder, "checkpoint.npz")
    seen = _whole_save(ctx, path + ".json", path, state, contract)
    operations, sizes, published = _with_unseen_publication(seen, folder)
    expect(
        seen.get("first") == "saved",
        "the save to a free name finishes",
        {k: seen[k] for k in ("status", "first") if k in seen},
        "the save to a new path in an empty folder did not finish, so there was no publication whose order "
        "could be judged -> save must succeed on a free path",
    )
    expect(
        _publication(operations),
        "a finished temporary file published under the final name (link, rename or replace)",
        {"operations": _collapsed(operations)[:40]},
        f"no publication was observed: the save wrote {os.path.basename(path)} in place ("
        + ", ".join(_collapsed(operations)[:6])
        + "), so no moment exists before which the name is absent and after which its bytes are all on disk -> "
        "write a temporary file in the same folder, flush and fsync it, then publish it under the final name in "
        "one step (os.link)"
        + mark("new-temp-name", "fsync-before-publish", "exclusive-publish", cause="no-publication"),
    )
    moved = seen.get("cwd_moved")
    expect(
        not moved,
        "the process's working directory left as it was during the save",
        moved,
        f"the save changed the process's working directory (to {(moved or {}).get('cwd')}, seen at "
        f"{(moved or {}).get('at')}): every thread shares it, so a relative path another thread saves or reads "
        "meanwhile lands in that folder -> never os.chdir in save; join the folder to each name instead"
        + mark("exact-path", cause="changes-working-directory"),
    )
    fault = _order_fault(operations)
    if fault is None:
        fault = _sync_fault(sizes)
    elsewhere = [(kind, source) for kind, source, target in published if source != target]
    expect(
        not elsewhere,
        f"the temporary file written in the checkpoint's folder {folder}",
        {"operations": _collapsed(operations)[:40], "published from": [source for _, source in elsewhere]},
        f"the save wrote its temporary file in {elsewhere[0][1] if elsewhere else ''} and published it into "
        f"{folder} with {elsewhere[0][0] if elsewhere else ''} -> write the temporary file in the target's own "
        "folder (tempfile.mkstemp(dir=the target's folder)): when the two folders are on different file systems, "
        "os.link and os.replace fail (EXDEV) and the checkpoint cannot be published"
        + mark("new-temp-name", cause="temporary-elsewhere"),
    )
    expect(
        fault is None,
        "write ..., fsync, then link/rename/replace",
        {"operations": _collapsed(operations)[:40], "fault": fault},
        f"the save published its file before its bytes were on disk: {fault} -> write every byte, flush, fsync "
        "the file, and only then give it its final name; a crash after publishing must find a complete file"
        + mark("fsync-before-publish", cause=_fault_cause(fault)),
    )
    return _large_save_through_a_link(ctx, state, contract)


LARGE_ROWS = 1 << 19  # a checkpoint of about 2 MB (its order alone 2 MiB as int32): a save's other size


def _first_feature(value):
    """The first entry of a weights-like array, placed as `value` is (a JAX array stays one, on its sharding)."""
    first = np.asarray(value)[:1]
    sharding = getattr(value, "sharding", None)
    return jax.device_put(first, sharding) if sharding is not None else first


def _large_save_through_a_link(ctx, state: dict, contract: dict):
    """The same save at another size, about 2 MB (LARGE_ROWS rows, one feature), to a path whose '..' follows a
    symbolic link to a folder: 'large/via/../checkpoint.npz' with via -> real/inner, which the OS resolves to
    large/real/checkpoint.npz (string arithmetic, os.path.normpath, makes it large/checkpoint.npz). Its bytes
    must be fsynced before publishing as the small one's were, and the file must be where the OS resolves it."""
    rows = LARGE_ROWS  # one feature: the data sent to the learner's contract stays small (4 MiB)
    data = Dataset(np.zeros((rows, 1), np.float32), np.zeros(rows, np.float32))
    large = ctx.impl.contract(data, _config(ctx))
    order = np.asarray(state["order"])
    bigger = {
        **state,
        **{name: _first_feature(state[name]) for name in ("weights", "momentum")},
        "order": np.arange(rows - 1, -1, -1).astype(order.dtype),
        "cursor": 0,
        "step": 0,
    }
    top = os.path.join(ctx.workdir, "large")
    os.makedirs(os.path.join(top, "real", "inner"))
    os.symlink(os.path.join("real", "inner"), os.path.join(top, "via"))
    path = os.path.join(top, "via", "..", "checkpoint.npz")
    resolved, normalised = os.path.join(top, "real", "checkpoint.npz"), os.path.join(top, "checkpoint.npz")
    seen = _whole_save(ctx, top + ".json", path, bigger, large)
    operations, sizes, _ = _with_unseen_publication(seen, os.path.dirname(resolved))
    size = os.path.getsize(resolved) if os.path.isfile(resolved) else None
    expect(
        seen.get("first") == "saved" and size is not None,
        f"the save to {path} finishes and writes {resolved}",
        {"save": seen.get("first", seen.get("status")), "at the resolved path": size is not None}
        | {"at the normalised path": os.path.lexists(normalised)},
        f"a save to {path}, whose 'via' is a symbolic link to real/inner, "
        + (
            f"did not finish ({seen.get('first', seen.get('status'))})"
            if seen.get("first") != "saved"
            else "wrote "
            + ("large/checkpoint.npz, the path string arithmetic makes," if os.path.lexists(normalised) else "no file")
            + " instead of large/real/checkpoint.npz, where the OS resolves it ('..' leaves the folder via leads to)"
        )
        + " -> pass the path to the OS as given: no os.path.normpath, and no os.path.abspath for the folder that"
        " names the file (both drop '..' by string arithmetic); join to the working directory if an absolute path "
        "is needed" + mark("exact-path"),
    )
    fault = _order_fault(operations) or _sync_fault(sizes)
    return expect(
        fault is None,
        f"write ..., fsync, then link/rename/replace, for a checkpoint of {size} bytes too",
        {"operations": _collapsed(operations)[:40], "fault": fault, "bytes": size},
        f"a save of {rows} rows ({size} bytes) published its file before its bytes were on disk: {fault} (the "
        "small checkpoint's were synced) -> fsync every temporary file whatever its size, then publish it"
        + mark("fsync-before-publish", cause=_fault_cause(fault)),
    )


def interrupted_save_leaves_nothing_or_a_checkpoint(ctx):
    """A save killed at each of its file operations leaves nothing or a complete checkpoint, and a re-run can save.

    After each kill a new save to the same name (a re-run of the command) must succeed if the name is
    still free and give back its own state, or refuse with CheckpointExistsError if the killed save had
    published. Judged through the learner's own restore, whatever its NPZ members are called.
    """
    points = 0
    for number, outcome, path, state, again, contract in _interrupted_saves(ctx, "kill"):
        points += 1
        pids = (outcome.get("saver_pid"), outcome.get("caller_pid"))
        _after_a_kill(ctx, number, outcome.get("at"), path, state, again, contract, pids)
    expect(points > 0, "a save with file operations to stop at", "none observed", _NO_OPERATIONS)
    return f"killed at each of {points} file operations: nothing or a complete checkpoint; re-run saved", "as expected"


def _shared_names(removed: list, rival: list) -> list:
    """The names among `removed` that the rival saver itself opened for writing: both saves used that name."""
    made = interrupt.targets(rival, ("open", "create"))
    return [name for name in removed if name in made]


def _race_cause(
    saved: list,
    losers_exist: bool,
    wrong: str,
    removed: list,
    operations: list | None = None,
    rival: list = (),
    final: tuple = (),
) -> str:
    shared = _shared_names(removed, list(rival))
    if shared:
        return (
            f"both saves used the same temporary name {shared[0]}: the rival opened it for writing too and then "
            "published or removed it, under the first save that was still writing it (the first was paused while "
            "the rival ran) -> give every save a name no other save can draw (tempfile.mkstemp(dir=the target's "
            "folder) creates it exclusively); a name derived from the target (path + '.tmp') or drawn from a "
            "seeded generator (random.Random(0) gives every process the same names) is shared" + mark("new-temp-name")
        )
    if removed:
        return (
            f"the rival's save removed {removed[:3]}, which the first save had made and was still using (the first "
            "was paused while the rival ran) -> a save removes only files it made itself, or temporaries whose "
            "writer process is gone; never every name that looks like a temporary" + mark("new-temp-name")
        )
    if len(saved) == 2 and operations is not None and not _publication(operations):
        return (
            "both reported success, so one wrote over the other's checkpoint: the save opened the final name for "
            "writing (no publication), and an existence check before that open leaves a gap another saver can use "
            "-> write a temporary file and publish it with an operation that fails if the name exists (os.link)"
            + mark("exclusive-publish", cause="check-then-open")
        )
    if len(saved) == 2:
        return (
            "both reported success, so one replaced the other's published checkpoint -> publish with an operation "
            "that fails if the name exists (os.link, or open(path, 'xb')); an existence check before os.replace "
            "leaves a gap another saver can use, and a lock held in one process's memory does not stop another"
            + mark(cause="check-then-replace")
        )
    if not saved:
        return "neither save succeeded, although the name was free for the first to publish"
    if not losers_exist:
        made, theirs = (set(interrupt.targets(labels, ("open", "create"))) for labels in (operations, rival))
        again = sorted(made & theirs - set(final))
        return "the losing save did not raise errors.CheckpointExistsError" + (
            f": both savers opened the temporary name {again[0]}, so the second found it taken -> two processes "
            "drew the same name: take names from tempfile.mkstemp, os.urandom or uuid4, never from the global "
            "random module (seeded alike, it repeats in every process)" + mark("new-temp-name")
            if again
            else " -> refuse a taken name with the course's error"
        )
    if wrong.startswith("beside the checkpoint"):
        return f"{wrong} -> remove the temporary file whether publishing succeeded or raised (try/finally)" + mark(
            "new-temp-name"
        )
    return f"the final file is not the checkpoint of the save that succeeded ({wrong})"


def racing_saves_never_overwrite(ctx):
    """A second saver, another process, saving to the same path inside each gap of the first: exactly one wins.

    The other raises CheckpointExistsError and the path holds the winner's checkpoint (judged through
    the learner's own restore).
    """
    points = 0
    for number, outcome, path, state, rival, contract in _interrupted_saves(ctx, "race"):
        points += 1
        if outcome["status"] != "done":
            expect(False, "both saves to return or raise", outcome, "the raced save did not finish")
        saved = [who for who in ("first", "rival") if outcome.get(who) == "saved"]
        losers_exist = all(outcome.get(f"{who}_exists_error") for who in ("first", "rival") if who not in saved)
        winner = {"first": state, "rival": rival}.get(saved[0]) if len(saved) == 1 else None
        wrong = _holds(ctx, path, contract, winner) if winner is not None else "no single winner"
        left = sorted(set(os.listdir(os.path.dirname(path))) - {os.path.basename(path)})
        if not wrong and left:
            wrong = f"beside the checkpoint the race left {left[:3]}: a loser must remove its temporary file too"
        expect(
            len(saved) == 1 and losers_exist and not wrong,
            "exactly one save succeeds, the other raises CheckpointExistsError, the path holds the winner's checkpoint",
            {k: outcome.get(k) for k in ("at", "first", "rival")} | {"final file": wrong or "the winner's"},
            f"a second saver (another process) ran at file operation {number} ({outcome.get('at')}) of the first and "
            + _race_cause(
                saved,
                losers_exist,
                wrong,
                outcome.get("removed_by_rival", []),
                outcome.get("operations"),
                outcome.get("rival_operations", []),
                (os.path.basename(path), os.path.basename(os.path.dirname(path))),
            ),
        )
    expect(points > 0, "a save with file operations to race at", "none observed", _NO_OPERATIONS)
    _raced_in_the_same_process(ctx)
    _published_without_hard_links(ctx)
    _raced_into_a_new_folder(ctx)
    return f"raced by another process at each of {points} file operations: one winner", "as expected"


def _raced_into_a_new_folder(ctx) -> None:
    """Two savers (two processes) of different names into one folder that neither found: the rival saves while
    the first is paused at each folder it makes (its mkdir about to run). Both names were free, so both must
    save, and each name must then hold its own saver's checkpoint (judged through the learner's restore)."""
    state, other, contract = _two_states(ctx)
    base = os.path.join(ctx.workdir, "race-new-folder")
    os.makedirs(os.path.join(base, "listing"))
    listed = _whole_save(
        ctx, base + ".listing.json", os.path.join(base, "listing", "new", "first.npz"), state, contract
    )
    operations = listed.get("operations", [])
    for number in [n for n, op in enumerate(operations, start=1) if op.startswith("mkdir ")][:3]:
        folder = os.path.join(base, str(number), "new")
        os.makedirs(os.path.dirname(folder))
        raced = _race_two_names(ctx, folder, number, "race", (other, contract), contract, (state, other))
        if raced is None:
            continue  # the first save never reached that mkdir again: nothing was raced
        outcome, wrong = raced
        expect(
            not wrong,
            "both saves succeed, each name holding its own checkpoint",
            {k: outcome.get(k) for k in ("at", "first", "rival")} | wrong,
            f"two saves of different names (first.npz, rival.npz) into one folder neither found: the rival saved "
            f"while the first was about to make the folder ({outcome.get('at')}); then "
            + "; ".join(f"{who}: {what}" for who, what in wrong.items())
            + " -> make the folder with os.makedirs(folder, exist_ok=True) (a folder another saver just made is "
            "no error), and remove on failure only the folders this save made and left empty"
            + mark("exclusive-publish"),
        )


NO_LINK_ERRORS = ("EPERM", "EOPNOTSUPP", "EXDEV")  # os.link where there are no hard links: FAT, some network mounts


def _published_without_hard_links(ctx) -> None:
    """A save on a file system without hard links: every os.link raises (EPERM, EOPNOTSUPP or EXDEV), another
    saver's file having appeared at the path just before. Whatever the save falls back to, that file must stay
    byte for byte, and the save must raise (the two savers are then one winner and one loser; which error a failed
    write raises is not the rule's, as for a full disk)."""
    state, _, contract = _two_states(ctx)
    wrong = {}
    for name in NO_LINK_ERRORS:
        folder = os.path.join(ctx.workdir, "no-hard-links", name, "folder")
        os.makedirs(folder)
        path = os.path.join(folder, "checkpoint.npz")
        seen = _whole_save(ctx, folder + ".json", path, state, contract, f"no-links:{name}")
        if "failed_at" not in seen:
            continue  # it never calls os.link: the race between processes judges how it publishes
        operations = seen.get("operations", [])
        after = _collapsed(operations[operations.index(seen["failed_at"]) + 1 :])[:4]
        with open(path, "rb") if os.path.isfile(path) and not os.path.islink(path) else contextlib.nullcontext() as f:
            kept = f is not None and f.read() == interrupt.RIVAL_BYTES
        if not kept:
            wrong[name] = f"replaced the other saver's file (after the refused link: {', '.join(after) or 'nothing'})"
        elif seen.get("first") == "saved":
            wrong[name] = "reported success, though the path holds the other saver's file"
    expect(
        not wrong,
        "the other saver's file kept and the save refused, for each errno",
        wrong,
        "on a file system without hard links (every os.link raised "
        + " / ".join(wrong)
        + "), after another saver's file appeared at the path: "
        + "; ".join(f"with {name} the save {what}" for name, what in wrong.items())
        + " -> publish only with an operation that fails if the name exists; when os.link is refused, raise "
        "CheckpointWriteError instead of falling back to os.rename or os.replace, which overwrite"
        + mark("exclusive-publish"),
    )


def _whole_save(ctx, record: str, path: str, state: dict, contract: dict, mode: str = "kill") -> dict:
    """One save of `path` run to its end in a forked child, every file operation it makes listed in `record` (it is
    stopped at none: the operation after the harness's last); `mode` "no-links:E" refuses every os.link with E."""
    return _save_at(ctx, interrupt.MAX_OPERATIONS + 1, mode, record, (path, state, contract))


def _save_at(ctx, at: int, mode: str, record: str, *saves: tuple) -> dict:
    """The learner's save, given the first of `saves`, in a forked child stopped, failed or raced (by a save given
    the second) at its file operation `at` as `mode` says (checker/interrupt.py); its operations listed in `record`."""
    return probe("interrupted_save", ctx.impl.save, at, mode, record, *saves)


def _raced_in_the_same_process(ctx) -> None:
    """A second save of the same path in the same process, run during the first save's first write (as another
    thread's would): a save that reports success leaves its own checkpoint at the path, whatever the other did."""
    state, other, contract = _two_states(ctx)
    base = os.path.join(ctx.workdir, "race-here")
    os.makedirs(os.path.join(base, "whole"))
    whole = _whole_save(ctx, base + ".whole.json", os.path.join(base, "whole", "checkpoint.npz"), state, contract)
    writes = [n for n, op in enumerate(whole.get("operations", []), start=1) if op.startswith("write")]
    if not writes:
        return
    path = os.path.join(base, "checkpoint.npz")
    outcome = _save_at(ctx, writes[0], "race-here", base + ".json", (path, state, contract), (path, other, contract))
    saved = [who for who in ("first", "rival") if outcome.get(who) == "saved"]
    if outcome.get("status") == "done" and len(saved) == 1:  # two or none: the race between processes judges
        wrong = _holds(ctx, path, contract, {"first": state, "rival": other}[saved[0]])
        expect(
            not wrong,
            "the save that reported success leaves its own checkpoint at the path",
            {k: outcome.get(k) for k in ("at", "first", "rival")} | {"final file": wrong},
            f"a second save of the same path in the same process (as another thread's would) ran during the first "
            f"save's first write ({outcome.get('at')}); the {saved[0]} save reported success, but the path then held "
            f"{wrong}: both saves wrote one temporary file (a name made from the path and the process id, opened with "
            "truncation), so the other save's bytes went into the published checkpoint -> draw a new temporary name "
            "for every save and create it exclusively (tempfile.mkstemp(dir=the target's folder))"
            + mark("new-temp-name"),
        )
    _one_state_to_two_names_here(ctx, base, writes[0], state, contract)


def _one_state_to_two_names_here(ctx, base: str, at: int, state: dict, contract: dict) -> None:
    """One state saved to two names in one folder in one process, the second save run during the first's write
    `at` (as another thread of a checkpointer would): both names were free, so both saves succeed, each name
    holding the state (judged through the learner's restore)."""
    folder = os.path.join(base, "two-names")
    os.makedirs(folder)
    raced = _race_two_names(ctx, folder, at, "race-here", (), contract, (state, state))
    if raced is None:
        return  # the save never reached that write again: nothing was raced
    outcome, wrong = raced
    expect(
        not wrong,
        "both saves succeed, each name holding the state",
        {"at": outcome.get("at")} | wrong,
        f"one state saved to two free names (first.npz, rival.npz) in one folder, the second save run in the same "
        f"process during the first's write ({outcome.get('at')}), as another thread's would: "
        + "; ".join(f"{who}: {what}" for who, what in wrong.items())
        + " -> the two saves took one temporary name, made from what they share (the process id, the state "
        "object's id(), the folder, the time): draw a new name for every save and create it exclusively "
        "(tempfile.mkstemp(dir=the target's folder))" + mark("new-temp-name"),
    )


def _race_two_names(ctx, folder: str, at, mode: str, rival: tuple, contract: dict, kept: tuple):
    """Save `kept[0]` to first.npz in `folder`, the rival save to rival.npz (`rival`: its arguments after the path)
    run at the first's operation `at` (`mode`: interrupt's race or race-here). None if the first never reached `at`
    again (nothing was raced); else the outcome and what went wrong: each save not reported saved, then each file
    not holding its saver's state (`kept[1]` for the rival; judged through the learner's restore)."""
    paths = {"first": os.path.join(folder, "first.npz"), "rival": os.path.join(folder, "rival.npz")}
    outcome = _save_at(ctx, at, mode, folder + ".json", (paths["first"], kept[0], contract), (paths["rival"], *rival))
    if outcome.get("status") != "done" or not outcome.get("rival_ran"):
        return None
    held = {who: _holds(ctx, paths[who], contract, state) for who, state in zip(paths, kept)}
    wrong = {who: outcome.get(who) for who in paths if outcome.get(who) != "saved"}
    wrong |= {f"{who}'s file": found for who, found in held.items() if found and who not in wrong}
    return outcome, wrong


_NO_OPERATIONS = (
    "the save finished without one file operation the checker observes (open for writing, write, fsync, link, "
    "rename, replace), so no point existed to stop or race it at -> write the checkpoint through Python's file "
    "objects (np.savez on an open file) and publish it with os.link"
)


CHECKS = (
    contract_pins_the_experiment,
    checkpoint_holds_every_field,
    restore_returns_every_field,
    resume_continues_the_same_run,
    fresh_process_resume,
    save_never_overwrites,
    save_leaves_only_the_final_file,
    save_errors_leave_the_folder_as_it_was,
    restore_refuses_another_experiment,
    restore_refuses_damaged_checkpoints,
    invalid_arguments_are_refused,
    save_syncs_before_publishing,
    interrupted_save_leaves_nothing_or_a_checkpoint,
    racing_saves_never_overwrite,
    *search.checks_for(STAGE),
)
