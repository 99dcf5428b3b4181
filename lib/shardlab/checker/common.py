"""What every check shares: the run context, the verdict a check raises, and the inputs it builds.

A check is a function `check(ctx)` that returns `(expected, observed)` when it passes and
raises `CheckFailed(expected, observed, diagnosis)` when it does not. Expected values come
from NumPy formulas, coverage arithmetic or the course's PRNG recipe, never from the
reference implementation.
"""

import contextlib
import traceback
import types
from dataclasses import dataclass, field

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import shardlab.checker.wire as wire
from shardlab.core.config import BATCH_SIZE, NUM_DEVICES, SEED
from shardlab.core.devices import AXIS, make_mesh
from shardlab.core.fixtures import Dataset
from shardlab.io import plain as json_plain

TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}  # float32 arithmetic against float64 NumPy
PADDING_VALUE = 3.0  # what the checker puts in padded slots: mask 0 must win "whatever its contents"


class CheckFailed(Exception):
    """A check's verdict: what was expected, what was observed, and the likely cause."""

    def __init__(self, expected, observed, diagnosis: str):
        super().__init__(diagnosis)
        self.expected, self.observed, self.diagnosis = expected, observed, diagnosis


def expect(ok: bool, expected, observed, diagnosis: str):
    """Return (expected, observed) if `ok`, else raise CheckFailed with the diagnosis.

    A pass returns the values as given: a check returns its last pass's, and `cli.run_one` makes those plain once
    (a check's earlier passes are dropped, so making each plain here only copied arrays into lists to discard)."""
    if not ok:
        raise CheckFailed(plain(expected), plain(observed), diagnosis)
    return expected, observed


@dataclass
class Context:
    """The implementation under test and the fixed inputs every check uses."""

    impl: types.ModuleType
    spec: str  # how another interpreter loads the same implementation ('reference' or a path)
    data: Dataset
    mesh: Mesh
    workdir: str
    seed: int = SEED
    batch_size: int = BATCH_SIZE
    search_seed: int = 0  # seed of the randomised checks (printed with every verdict)
    thorough: bool = False  # a longer randomised search (--thorough)
    search_cases: int = 0  # cases per randomised check; 0: each check's own number
    cache: dict = field(default_factory=dict)  # work several checks share (a trained state, a compiled step)
    fresh: object = None  # () -> (implementation, hello) of the run's shared new interpreter (Fresh); None: own
    other_fs: str | None = None  # a scratch folder on another file system than workdir (None: there is none)
    focus: set | None = None  # while a shrink runs: the inputs its failing case ignored (properties.focused)


VERDICTS = "verdicts"  # ctx.cache key: check name -> passed?, for the checks this run has finished


def failed_here(ctx: Context, *names: str) -> list[str]:
    """Those of `names` that ran in this run and failed: a diagnosis points only at a check the learner sees fail."""
    seen = ctx.cache.get(VERDICTS, {})
    return [name for name in names if seen.get(name) is False]


def see(ctx: Context, *names: str) -> str:
    """' (see A, B)' for those of `names` that failed in this run, '' if none did."""
    failed = failed_here(ctx, *names)
    return f" (see {', '.join(failed)}, which failed above)" if failed else ""


def cached_step(ctx: Context, num_devices: int = NUM_DEVICES):
    """The implementation's compiled step for the first `num_devices` devices, built once per run."""
    if ("step", num_devices) not in ctx.cache:
        mesh = ctx.mesh if num_devices == ctx.mesh.size else make_mesh(num_devices)
        ctx.cache["step", num_devices] = ctx.impl.make_step(mesh)
    return ctx.cache["step", num_devices]


def plain(value):
    """JSON-ready copy: arrays become lists, floats keep 8 significant digits (shardlab.io.plain)."""
    return json_plain(value, digits=8)


def close(observed, expected) -> bool:
    """Same shape and equal within float32 tolerance (NaN never passes)."""
    observed, expected = np.asarray(observed, np.float64), np.asarray(expected, np.float64)
    return (
        observed.shape == expected.shape
        and bool(np.all(np.isfinite(observed)))
        and np.allclose(observed, expected, **TOLERANCE)
    )


def matches(observed, candidate) -> bool:
    """Like `close`, but NaN matches NaN: for naming which wrong formula an output follows."""
    observed, candidate = np.asarray(observed, np.float64), np.asarray(candidate, np.float64)
    return observed.shape == candidate.shape and np.allclose(observed, candidate, rtol=1e-4, atol=1e-6, equal_nan=True)


# Legal but degenerate rows: the mask must follow their *position* in the batch, never their values.
DEGENERATE = {
    0: "an all-zero row (zero target too: equal to zero padding)",
    1: "a duplicate of row 2",
    2: "a row duplicated by row 1",
    3: "a large-magnitude row (x1000)",
    4: f"a row equal to the checker's padding value {PADDING_VALUE}",
    5: "all-zero features with a non-zero target",
}


def leaves(value, where: tuple = ()):
    """(path of keys and indices, value) of every entry of a contract's nested dicts, lists and tuples."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, (*where, key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from leaves(item, (*where, index))
    else:
        yield where, value


def degenerate_data(data: Dataset) -> Dataset:
    """A copy of `data` whose rows 0..5 are the degenerate rows named in DEGENERATE."""
    features, targets = data.features.copy(), data.targets.copy()
    features[0], targets[0] = 0.0, 0.0
    features[1], targets[1] = features[2], targets[2]
    features[3], targets[3] = features[3] * 1000.0, targets[3] * 1000.0
    features[4], targets[4] = PADDING_VALUE, PADDING_VALUE
    features[5] = 0.0
    return Dataset(features, targets)


def batch_arrays(data: Dataset, ids, num_devices: int):
    """Host (features, targets, mask) for `ids`, padded to a device multiple with non-zero junk."""
    ids = np.asarray(ids)
    slots = -(-len(ids) // num_devices) * num_devices
    features = np.full((slots, data.features.shape[1]), PADDING_VALUE, np.float32)
    targets = np.full(slots, PADDING_VALUE, np.float32)
    mask = np.zeros(slots, np.float32)
    features[: len(ids)], targets[: len(ids)], mask[: len(ids)] = data.features[ids], data.targets[ids], 1.0
    return features, targets, mask


def placed(mesh: Mesh, features, targets, mask, weights, momentum) -> tuple:
    """The five step inputs on `mesh` with the course's shardings."""
    put = jax.device_put
    return (
        put(features, NamedSharding(mesh, P(AXIS, None))),
        put(targets, NamedSharding(mesh, P(AXIS))),
        put(mask, NamedSharding(mesh, P(AXIS))),
        put(np.asarray(weights, np.float32), NamedSharding(mesh, P())),
        put(np.asarray(momentum, np.float32), NamedSharding(mesh, P())),
    )


def _named_axes(spec) -> tuple:
    """A partition spec without its trailing unsplit dimensions (None), which place nothing differently."""
    parts = list(spec)
    while parts and parts[-1] is None:
        parts.pop()
    return tuple(parts)


def _slices(sharding, shape) -> dict:
    """Device id -> the (start, stop) of each dimension it holds: where every part of an array lives."""
    return {
        d.id: tuple((i.start or 0, shape[n] if i.stop is None else i.stop) for n, i in enumerate(index))
        for d, index in sharding.devices_indices_map(tuple(shape)).items()
    }


def sharding_of(array, mesh: Mesh, spec: P) -> str | None:
    """None if `array` is a jax.Array with NamedSharding(mesh, spec), else what it is instead.

    The mesh given is compared by what it places where: each device of `mesh`, in `mesh`'s order, must hold the
    part of the array `spec` gives it. A mesh of the same devices in another order places a split array's rows
    on other devices (and so differs); a replicated array is the same on any order of the same devices.
    """
    if not isinstance(array, jax.Array):
        return f"a {type(array).__name__}, not a jax.Array placed on the mesh"
    sharding = array.sharding
    if not isinstance(sharding, NamedSharding):
        return f"{type(sharding).__name__} on {len(sharding.device_set)} device(s), not a NamedSharding"
    given = [d.id for d in mesh.devices.flat]
    found = [d.id for d in sharding.mesh.devices.flat]
    if _named_axes(sharding.spec) != _named_axes(spec):
        return f"NamedSharding with {sharding.spec} over {sharding.mesh.size} device(s)"
    if sorted(found) != sorted(given):
        return (
            f"NamedSharding with {sharding.spec} on devices {sorted(found)}, but the mesh given holds devices "
            f"{sorted(given)} -> place on the mesh the function is given, never on one built from jax.devices()"
        )
    want, got = _slices(NamedSharding(mesh, spec), array.shape), _slices(sharding, array.shape)
    if want != got:  # P('data') and P('data', None) agree here: trailing dimensions unsplit place nothing differently
        moved = [d for d in given if want[d] != got.get(d)]
        return (
            f"NamedSharding with {sharding.spec} on a mesh of devices {found} in that order, but the mesh given "
            f"orders them {given}: device {moved[0]} holds rows {got[moved[0]][0]} where the mesh given puts rows "
            f"{want[moved[0]][0]} -> place on the mesh the function is given (its devices in its order), never on "
            "one rebuilt from its device ids or from jax.devices()"
        )
    return None


def replicas(array) -> list[np.ndarray]:
    """Every device's copy of a replicated array, in device order."""
    shards = sorted(array.addressable_shards, key=lambda s: s.device.id)
    return [np.asarray(s.data) for s in shards]


def raised_where(exc: BaseException) -> str:
    """`file:line in function` of the innermost frame that raised `exc`."""
    if getattr(exc, "shardlab_where", None):  # raised in the implementation's interpreter (checker/remote.py)
        return exc.shardlab_where
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "unknown place"
    frame = frames[-1]
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


def attempt(call, failed=None) -> tuple:
    """(what `call()` returned, '') or (`failed`, 'Type: message') where the learner's code raised: a refusal or a
    failure observed as a value. A stage not yet written (NotImplementedError) and a check's verdict pass through."""
    try:
        return call(), ""
    except (NotImplementedError, CheckFailed):
        raise
    except Exception as exc:
        return failed, wire.learner_error(exc)


class Fresh:
    """The run's one new interpreter for stage 3's checks that need one (`make` builds its Worker: four CPU
    devices, nothing of this run, a hash seed of its own). The fresh-interpreter resume runs first in it, then
    the contracts recomputed there: a second new interpreter would repeat JAX's start and the file's load for
    the same evidence. `ahead()` launches it in a thread while earlier checks run; `get()` reads its hello."""

    def __init__(self, make):
        self.make, self.impl, self.hello, self._ahead = make, None, None, None

    def ahead(self, needed: bool = True) -> None:
        """If `needed`, launch the interpreter now, in a thread; `get` adopts it (nothing of it is read before)."""
        import shardlab.checker.early as early

        if needed and self.impl is None and self._ahead is None:
            worker = self.make()
            args = (worker.spec, worker.call_seconds, worker.poisoned, worker.box, worker.scratch, True)
            self._ahead = (worker, early.in_background(lambda: early.launch(*args)))

    def get(self):
        """(the implementation, its hello), started on the first call."""
        import shardlab.checker.remote as remote

        if self.impl is None:
            worker, launching = self._ahead or (self.make(), None)
            self._ahead, self.impl = None, remote.RemoteImplementation(worker)
            launched = None
            if launching is not None:
                launching.join()
                launched = launching.found if not isinstance(launching.found, BaseException) else None
            self.hello = worker.start(launched)
        return self.impl, self.hello

    def close(self) -> None:
        if self._ahead is not None:  # launched ahead, never used: adopted only to be stopped
            self.get()
        if self.impl is not None:
            self.impl.close()


@contextlib.contextmanager
def fresh_implementation(ctx: "Context"):
    """The implementation loaded by a new interpreter (four CPU devices, nothing of this run, a hash seed of its
    own): the run's shared one (`Fresh`, closed with the run), else one of its own, closed afterwards."""
    import shardlab.checker.remote as remote

    if ctx.fresh:
        impl, hello = ctx.fresh()
    else:
        impl = remote.RemoteImplementation(remote.Worker(ctx.spec, scratch=ctx.workdir, fresh=True))
        hello = impl.worker.start()
    try:
        if "error" in hello:
            raise CheckFailed(
                "a fresh interpreter that loads the file", hello["error"]["cause"], hello["error"]["text"]
            )
        yield impl
    finally:
        if not ctx.fresh:
            impl.close()


def typed_key(value) -> bool:
    """Whether `value` is a typed PRNG key (jax.random.key), which has no NumPy dtype of its own."""
    return isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key)


def host(value) -> np.ndarray:
    """A NumPy copy of a state field; a typed PRNG key becomes its uint32 data."""
    if typed_key(value):
        value = jax.random.key_data(value)
    return np.array(value, copy=True)


def snapshot(state: dict) -> dict:
    """NumPy copies of every field of `state`."""
    return {name: host(value) for name, value in state.items()}


def fingerprint(value):
    """What a caller can see of `value`: type, dtype, shape, placement and bytes of every array, recursively.

    Two fingerprints are equal exactly when a call left its input as it was: the same dict entries, the
    same kind of array on the same devices with the same sharding, the same values.
    """
    if isinstance(value, dict):
        return ("dict", tuple((repr(k), fingerprint(v)) for k, v in value.items()))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(fingerprint(v) for v in value))
    if isinstance(value, jax.Array):
        if value.is_deleted():
            return ("a deleted jax.Array (its buffer was donated or deleted)",)
        sharding = value.sharding
        where = (type(sharding).__name__, str(getattr(sharding, "spec", "")), sorted(d.id for d in sharding.device_set))
        return ("jax.Array", str(value.dtype), value.shape, str(where), host(value).tobytes())
    if isinstance(value, np.ndarray):
        frozen = () if value.flags.writeable else ("read-only",)
        return ("numpy.ndarray", value.dtype.str, value.shape, value.tobytes(), *frozen)
    if isinstance(value, (bool, int, float, str, bytes, type(None), np.generic)):
        return (type(value).__name__, repr(value))
    return (type(value).__name__, id(value))  # a mesh, a step function: the same object


def describe(print_: tuple) -> str:
    """A fingerprint in words (without its bytes)."""
    if print_[0] in ("dict", "tuple", "list", "Dataset"):
        return print_[0]
    return " ".join(str(part) for part in print_[:4] if not isinstance(part, bytes))


def _flag_or_items(name: str, a: tuple, b: tuple) -> list[str] | None:
    """How an array's writeable flag changed, or which items of a tuple or list changed (None: neither)."""
    if a[0] == b[0] == "numpy.ndarray" and a[:4] == b[:4]:
        return [f"{name} made read-only (its flags.writeable set to False)" if b[4:] else f"{name} made writeable"]
    if a[0] == b[0] and a[0] not in ("dict", "jax.Array", "numpy.ndarray") and isinstance(a[1], tuple):
        if len(a[1]) == len(b[1]) and all(isinstance(x, tuple) for x in (*a[1], *b[1])):
            return changed_inputs(a[1], b[1], [f"{name}[{i}]" for i in range(len(a[1]))])
    return None


def changed_inputs(before, after, names) -> list[str]:
    """Which inputs (and which dict entries of them) differ between two lists of fingerprints, in words."""
    found = []
    for name, a, b in zip(names, before, after):
        if a == b:
            continue
        detail = _flag_or_items(name, a, b)
        if detail:
            found += detail
            continue
        if a[0] == b[0] == "dict":
            old, new = dict(a[1]), dict(b[1])
            for key in sorted(set(old) | set(new)):
                if old.get(key) != new.get(key):
                    was = describe(old[key]) if key in old else "absent"
                    now = describe(new[key]) if key in new else "absent"
                    same = was == now
                    found.append(f"{name}[{key}] " + ("values changed in place" if same else f"was {was}, now {now}"))
        else:
            found.append(f"{name} " + ("changed in place" if describe(a) == describe(b) else f"was {describe(a)}"))
    return found
