"""What the checks observe of a learner's function beyond its return value, computed where that function runs.

A probe takes a learner callable (the step, `save`) and plain arguments and returns plain data: the
lowered program's text, the traced program's top-level operations, the shapes each device's body
receives, the file operations of a save stopped or raced at one point. The checker runs the checks;
the interpreter that imports the learner's file runs the probes (`checker/worker.py`), so a probe's
answer is, like a return value, something the learner's process produced: the checks treat it as an
observation to judge, never as a verdict, and back every structural one with numbers they compute
themselves.
"""

import os
import threading

import jax
import jax.extend.core as jax_core
import numpy as np

import shardlab.checker.guard as guard
import shardlab.checker.interrupt as interrupt
import shardlab.checker.wire as wire


def lowered_text(step, *args) -> str:
    """The StableHLO text of `step` lowered for `args` (`step` must be jitted)."""
    return step.lower(*args).as_text()


def compiled_call(step, lower_args: tuple, call_args: tuple):
    """`step` lowered for `lower_args`, compiled, and run on `call_args`: the executable's own outputs."""
    return step.lower(*lower_args).compile()(*call_args)


def top_level_operations(step, *args) -> list[str]:
    """Names of the top-level operations JAX traces for `step(*args)`: ['jit'] for a jitted step."""
    return [eqn.primitive.name for eqn in jax.make_jaxpr(step)(*args).jaxpr.eqns]


def _mapped_inputs(jaxpr) -> list | None:
    found = None
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "shard_map":
            inner = eqn.params["jaxpr"]
            found = (found or []) + [list(v.aval.shape) for v in getattr(inner, "jaxpr", inner).invars]
        for sub in jax_core.jaxprs_in_params(eqn.params):
            deeper = _mapped_inputs(sub)
            if deeper is not None:
                found = (found or []) + deeper
    return found


def mapped_input_shapes(step, *args) -> list | None:
    """Shapes of the inputs each device's body receives, over every shard_map of `step(*args)` (None: no shard_map)."""
    return _mapped_inputs(jax.make_jaxpr(step)(*args).jaxpr)


def interrupted_save(save, stop_at: int, mode: str, report: str, first: tuple, rival: tuple = ()) -> dict:
    """`save(*first)` in a forked child stopped or raced at file operation `stop_at` (checker/interrupt.py).

    A save (or its rival) still running at its bound raises the time bound's verdict, as a call does: how long
    it ran says as much about the machine's load as about the save."""
    outcome = interrupt.interrupted(save, stop_at, mode, report, first, rival)
    if outcome["status"] == "hung":
        raise guard.Overrun(guard.loop_verdict("save", interrupt.CHILD_TIMEOUT))
    return outcome


def in_a_thread(function, *args) -> dict:
    """`function(*args)` called from a thread other than the main one, as background checkpointing calls save and
    restore: {"value": what it returned} or {"error": what it raised}."""
    found = {}

    def run():
        try:
            found["value"] = function(*args)
        except Exception as exc:
            found["error"] = wire.learner_error(exc)

    worker = threading.Thread(target=run, name="background-checkpoint")
    worker.start()
    worker.join()
    return found


def read_only_restore(restore, path: str, contract, mesh) -> dict:
    """`restore(path, contract, mesh)` with the checkpoint's folder read-only (checker/interrupt.py): {"state"} or
    {"error"}, and the write attempts refused ("tried")."""
    tried: list = []
    with interrupt.read_only(os.path.dirname(path), tried):
        try:
            return {"state": restore(path, contract, mesh), "tried": tried}
        except NotImplementedError:
            raise
        except Exception as exc:
            return {"error": wire.learner_error(exc), "tried": tried}


class _Counted:
    """A step that counts its calls, those made on tracers (under a transformation its caller applied) and those
    given a batch array on the host (a copy, not the batch's placed array); every other attribute is the step's own."""

    def __init__(self, step):
        self.step, self.calls, self.traced, self.host, self.outputs = step, 0, 0, 0, None

    def __call__(self, *args, **kwargs):
        self.calls += 1
        self.traced += any(isinstance(a, jax.core.Tracer) for a in (*args, *kwargs.values()))
        self.host += any(not isinstance(a, jax.Array) for a in args[:3])  # features, targets, mask
        self.outputs = self.step(*args, **kwargs)
        return self.outputs

    def __getattr__(self, name):
        return getattr(self.step, name)


def counted_transition(transition, state, data, batch_size, step, mesh) -> tuple:
    """(what `transition` returned, how many times it called the `step` it was given, (how many of those calls were
    on tracers: the step wrapped in a jax.jit, vmap or grad of the transition's own; how many were given a batch
    array that is no jax.Array: host copies of the batch; the names of the new weights and momentum that are not the
    objects the step's last call returned))."""
    counted = _Counted(step)
    result = transition(state, data, batch_size, counted, mesh)
    new, outputs = result[0] if isinstance(result, tuple) and result else None, counted.outputs
    returned = outputs[:2] if isinstance(outputs, tuple) and isinstance(new, dict) else ()
    copied = [name for name, array in zip(("weights", "momentum"), returned) if new.get(name) is not array]
    return result, counted.calls, (counted.traced, counted.host, copied)


def _writable(data) -> tuple:
    """(features, targets, the data in its own form over those two writable copies): one pair of objects that a
    probe changes in place between two calls, as a caller may."""
    features, targets = np.array(data[0], order="K"), np.array(data[1])
    return features, targets, (features, targets) if type(data) is tuple else type(data)(features, targets)


def contract_changed_in_place(contract, data, config, position: tuple) -> dict:
    """`contract` of writable copies of `data` (its form kept), then of those same arrays after feature `position`
    was raised by one in place: {"first", "again"}. Both calls see one pair of objects, as a caller's do."""
    features, _, kept = _writable(data)
    first = contract(kept, config)
    features[tuple(position)] += np.float32(1)
    return {"first": first, "again": contract(kept, config)}


def next_batch_changed_in_place(next_batch, state, data, batch_size: int, mesh, row: int) -> dict:
    """`next_batch` on writable copies of `data` (its form kept), then again from the state it returned, on those same
    arrays after row `row`'s features and target were raised by one in place: the second batch's ids and rows
    {"ids", "features", "targets"} on the host. Both calls see one pair of objects, as a caller's do."""
    features, targets, kept = _writable(data)
    new, _ = next_batch(state, kept, batch_size, mesh)
    features[int(row)] += np.float32(1)
    targets[int(row)] += np.float32(1)
    _, batch = next_batch(new, kept, batch_size, mesh)
    return {name: np.asarray(getattr(batch, name)) for name in ("ids", "features", "targets")}


EDIT = "an entry the caller added"  # the key a caller's edit adds to a result it was given


def _dicts(value) -> list:
    """The dicts of a result: itself, or those a tuple of results holds (next_batch's and transition's state)."""
    if isinstance(value, dict):
        return [value]
    return [item for item in value if isinstance(item, dict)] if isinstance(value, (tuple, list)) else []


def edited_between_calls(function, *args) -> dict:
    """`function(*args)` twice, with the first result's dicts edited in between as their caller may edit its own (an
    entry added): {"same_object": the second result is the first, "edit_seen": the added entry is in the second}."""
    first = function(*args)
    for found in _dicts(first):
        found[EDIT] = True
    second = function(*args)
    return {"same_object": second is first, "edit_seen": any(EDIT in found for found in _dicts(second))}


def open_under(function, folder: str) -> list:
    """The paths at or under `folder` that descriptors of the process where `function` runs name now (a removed
    file's ends in ' (deleted)'). `function` is not called: it says which process to look in. Called after a
    learner's call into a folder made new for it, where nothing else opens files, every one is a descriptor that
    call left open."""
    return interrupt.open_under(folder)


def left_open(function, folder: str, *args) -> dict:
    """`function(*args)`, then what it opened in `folder` (or `folder` itself) and left open when it returned:
    {"left": the paths those descriptors name, "error": what it raised, or ''}."""
    before, error = interrupt.descriptors(), ""
    try:
        function(*args)
    except NotImplementedError:
        raise
    except Exception as exc:
        error = wire.learner_error(exc)
    return {"left": interrupt.open_under(folder, before), "error": error}


PROBES = {
    "edited_between_calls": edited_between_calls,
    "contract_changed_in_place": contract_changed_in_place,
    "counted_transition": counted_transition,
    "next_batch_changed_in_place": next_batch_changed_in_place,
    "lowered_text": lowered_text,
    "compiled_call": compiled_call,
    "top_level_operations": top_level_operations,
    "mapped_input_shapes": mapped_input_shapes,
    "interrupted_save": interrupted_save,
    "read_only_restore": read_only_restore,
    "left_open": left_open,
    "open_under": open_under,
    "in_a_thread": in_a_thread,
}
# probes that may take longer than one call's bound (each forked save has its own)
LONG = {"interrupted_save": 2 * interrupt.CHILD_TIMEOUT}


def probe(name: str, target, *args):
    """Run probe `name` on `target` where `target` runs: in the worker for a remote function, else right here."""
    if isinstance(target, wire.Handle):  # a remote function (checker/remote.py)
        return target.probe(name, *args)
    return PROBES[name](target, *args)
