"""The fused loop: K complete transitions per dispatch, with the sampler and the dataset on the devices.

One compiled `shard_map` program first plans the K batches with the device sampler
(`perf.device_sampler.plan`, bit-identical to the host sampler; the sampler does not
depend on the weights), then runs `lax.scan` over K steps. Every device gathers the rows
of its own block of slots from its copy of the dataset (slot j lives on the same device as
in the course loop, `P('data')` blocks) and the devices exchange, depending on the variant
(`perf.costmodel`), each step's packed sums (`perf.steps`), every step's statistics once
(`perf.stats`) or every device's slots once (`perf.inputs`); the stage 2 update follows.

The dataset is copied to every device once (1,023 x 64 float32 is 262 KB); a dataset too
large for that would be sharded by row and gathered where it lives (the bench's rig/bench/resident.py).

A dispatch runs `active <= K` steps (a traced argument, so one executable serves every
chunk): steps past `active` change nothing, so a run stops exactly at any step boundary.
The state in and out is the course's six-field state (`core.schema`), so `sl.save` and
`sl.restore` see nothing new. Between the dispatches of one `run` everything stays on the
devices (the sampler, weights and momentum feed the next dispatch as they are); each
dispatch also writes its sampler, losses and slot IDs into one int32 record (`pack`), whose
copy to the host starts when the dispatch ends; the run waits for its records once, at the
end, and converts them on the host without a loop over steps. The boundary in is one
transfer (none when the state is the one the loop returned last, whose sampler is still on
the devices).
"""

from functools import cache, partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from shardlab.core.batch import REPLICATED, put_whole
from shardlab.core.config import DECAY, LEARNING_RATE, check_batch_size
from shardlab.core.fixtures import check_dataset
from shardlab.core.schema import DTYPES
from shardlab.core.state import updated
from shardlab.errors import ConfigError
from shardlab.perf import costmodel, device_sampler
from shardlab.perf.device_sampler import DeviceSampler

STEPS_PER_DISPATCH = 100


class Copied(NamedTuple):
    """The dataset on every device of the mesh (replicated `features` and `targets`)."""

    features: jax.Array
    targets: jax.Array


class Carry(NamedTuple):
    """What a dispatch hands the next one, on the devices: the sampler, the weights and the momentum."""

    sampler: DeviceSampler
    weights: jax.Array
    momentum: jax.Array


class Dispatch(NamedTuple):
    """What one dispatch returns, still on the devices: the carry, its record (`pack`) and its step count."""

    carry: Carry
    record: jax.Array
    active: int


def pack(sampler: DeviceSampler, losses, ids):
    """One int32 vector of a dispatch's results: key bits, order, cursor, loss bits (K), slot IDs (K x S)."""
    bits = partial(jax.lax.bitcast_convert_type, new_dtype=jnp.int32)
    parts = (bits(sampler.key), sampler.order, sampler.cursor[None], bits(losses), ids.reshape(-1))
    return jnp.concatenate([part.astype(jnp.int32) for part in parts])


def unpack(record: np.ndarray, rows: int, k: int) -> tuple[dict, np.ndarray, np.ndarray]:
    """(sampler fields in the schema's host form, K losses, K x S slot IDs): views of one fetched record."""
    order_at, losses_at = 2, 2 + rows + 1
    ids = record[losses_at + k :]
    sampler = {
        "key": record[:order_at].view(DTYPES["key"]),
        "order": record[order_at : order_at + rows].view(DTYPES["order"]),
        "cursor": int(record[order_at + rows]),
    }
    return sampler, record[losses_at : losses_at + k].view(np.float32), ids.reshape(k, len(ids) // k)


def recorded(body):
    """`body` with its losses and IDs replaced by the record of the dispatch (`pack`)."""

    def program(*args, **static):
        key, order, cursor, weights, momentum, losses, ids = body(*args, **static)
        return key, order, cursor, weights, momentum, pack(DeviceSampler(key, order, cursor), losses, ids)

    return program


def copy_dataset(data, mesh: Mesh, put=put_whole) -> Copied:
    """Place the whole dataset on every device of `mesh`, once."""
    data = check_dataset(data)
    return Copied(put(data.features, mesh, REPLICATED), put(data.targets, mesh, REPLICATED))


@cache
def compile_loop(body, mesh: Mesh, rows: int, batch_size: int, k: int, learning_rate: float, decay: float):
    """jit(shard_map(body)) over replicated inputs and outputs, with the loop's static sizes bound.

    The program returns (key, order, cursor, weights, momentum, record): `body`'s losses and
    IDs go into the record (`recorded`). Cached: loops of the same body, mesh and sizes share
    one program, so XLA compiles it once.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"steps per dispatch must be a positive integer, got {k!r}")
    static = {
        "batch_size": check_batch_size(batch_size),
        "slots": device_sampler.slot_count(batch_size, rows, mesh.size),
        "k": k,
        "learning_rate": float(learning_rate),
        "decay": float(decay),
    }
    specs = {"in_specs": (REPLICATED,) * 8, "out_specs": (REPLICATED,) * 6}
    check_vma = getattr(body, "check_vma", True)
    mapped = jax.shard_map(partial(recorded(body), **static), mesh=mesh, check_vma=check_vma, **specs)
    return jax.jit(mapped)


class FusedLoop:
    """K transitions per dispatch; `run(state, steps)` takes and returns the course's state.

    `variant` names the per-device program (`perf.costmodel.VARIANTS`); the default `"auto"`
    lets the cost model choose from the batch size, width, device count and K (`self.choice`
    holds its inputs and prediction). `body`, if given, is a per-device program to use instead.
    """

    def __init__(self, data, mesh: Mesh, batch_size: int, k: int = STEPS_PER_DISPATCH, body=None, **options):
        self.data, self.mesh, self.batch_size, self.k = check_dataset(data), mesh, batch_size, k
        self.copied = copy_dataset(self.data, mesh)
        rows, width = self.data.features.shape
        learning_rate, decay = options.get("learning_rate", LEARNING_RATE), options.get("decay", DECAY)
        self.variant, self.choice = options.get("variant", costmodel.AUTO), None
        if body is None and self.variant == costmodel.AUTO:
            slots = device_sampler.slot_count(batch_size, rows, mesh.size)
            self.choice = costmodel.choose(batch_size, width, mesh.size, k, slots, options.get("costs"))
            self.variant = self.choice.pick
        body = body or costmodel.body_of(self.variant)
        self.program = compile_loop(body, mesh, rows, batch_size, k, float(learning_rate), float(decay))
        self._placed, self._counts = {}, {}  # device forms of recent samplers and of step counts

    def put(self, values) -> jax.Array:
        """A host value on every device of the mesh."""
        return put_whole(values, self.mesh, REPLICATED)

    def _sampler(self, state: dict) -> DeviceSampler:
        """The device form of `state`'s sampler: reused if these very host arrays were placed or returned lately.

        The host arrays a dispatch returns are read-only, so a remembered pair cannot go stale.
        """
        mark = (id(state["key"]), id(state["order"]), int(state["cursor"]))
        if mark in self._placed:
            held, sampler = self._placed[mark]
        else:
            held = (state["key"], state["order"])  # keeps the ids in `mark` from being reused
            sampler = device_sampler.to_device(state, self.put)
        self._remember(mark, held, sampler)
        return sampler

    def _remember(self, mark, held, sampler: DeviceSampler) -> None:
        """Keep `mark` and the one used most recently before it (the last state in and the last out)."""
        others = [item for item in self._placed.items() if item[0] != mark][-1:]
        self._placed = {**dict(others), mark: (held, sampler)}

    def _active(self, active: int) -> jax.Array:
        if active not in self._counts:
            self._counts[active] = self.put(np.int32(active))
        return self._counts[active]

    def carry(self, state: dict) -> Carry:
        """The device form of a course state: its sampler (placed, or reused), weights and momentum."""
        return Carry(self._sampler(state), state["weights"], state["momentum"])

    def arguments(self, state, active: int) -> tuple:
        """The program's eight placed arguments for a course state (or a Carry) and `active` steps."""
        carry = state if isinstance(state, Carry) else self.carry(state)
        return (*self.copied, *carry.sampler, carry.weights, carry.momentum, self._active(active))

    def dispatch(self, state, active: int) -> Dispatch:
        """One call of the compiled program: `active` steps from a course state or a Carry, left on the devices."""
        if not 1 <= active <= self.k:
            raise ConfigError(f"a dispatch runs 1..{self.k} steps, got {active}")
        key, order, cursor, weights, momentum, record = self.program(*self.arguments(state, active))
        record.copy_to_host_async()  # the copy starts when the program ends; `finish` waits for it
        return Dispatch(Carry(DeviceSampler(key, order, cursor), weights, momentum), record, active)

    def finish(self, state: dict, dispatches) -> tuple[dict, np.ndarray, device_sampler.StepIds]:
        """(course state, losses, IDs per step) after `dispatches` from `state`, from their records, waited for once."""
        dispatches = list(dispatches)
        records = [np.asarray(d.record) for d in dispatches]
        rows = self.data.features.shape[0]
        parts = [unpack(record, rows, self.k) for record in records]
        host = parts[-1][0]
        for field in ("key", "order"):  # own copies (the record is let go), read-only (see `_sampler`)
            host[field] = np.array(host[field])
            host[field].flags.writeable = False
        last, steps = dispatches[-1], sum(d.active for d in dispatches)
        self._remember(
            (id(host["key"]), id(host["order"]), host["cursor"]), (host["key"], host["order"]), last.carry.sampler
        )
        losses = np.concatenate([part[1][: d.active] for part, d in zip(parts, dispatches)])
        ids = np.concatenate([part[2][: d.active] for part, d in zip(parts, dispatches)])
        state = {**updated(state, last.carry.weights, last.carry.momentum, steps), **host}
        return state, losses, device_sampler.StepIds.of(ids)

    def run(self, state: dict, steps: int) -> tuple[dict, np.ndarray, device_sampler.StepIds]:
        """Return (new state, per-step pre-update losses, per-step IDs) after exactly `steps` transitions.

        The dispatches follow one another on the devices; the results are fetched once, at the end.
        """
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ConfigError(f"steps must be a non-negative integer, got {steps!r}")
        if steps == 0:
            return state, np.zeros(0, np.float32), device_sampler.StepIds.join([])
        carry, dispatches = self.carry(state), []
        for done in range(0, steps, self.k):
            dispatches.append(self.dispatch(carry, min(steps - done, self.k)))
            carry = dispatches[-1].carry
        return self.finish(state, dispatches)
