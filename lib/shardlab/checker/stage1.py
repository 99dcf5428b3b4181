"""Stage 1 checks: `initial` and `next_batch` against coverage arithmetic and the course's PRNG recipe.

The recipe is the specification: key = PRNGKey(seed); key, subkey = split(key);
order = permutation(subkey, n); at each new epoch split the saved key again.
"""

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from shardlab.checker.common import expect, sharding_of
from shardlab.core.devices import AXIS
from shardlab.core.sampler import epoch_batches
from shardlab.core.state import FIELDS
from shardlab.lessons import oracle

STAGE = 1
EPOCHS = 3


def _run(ctx, seed: int, batch_size: int, count: int) -> tuple[list, list]:
    """(states, batches): copies of `initial(seed)` and of the states after `count` next_batch calls."""
    state = ctx.impl.initial(seed, ctx.data, ctx.mesh)
    states, batches = [_snapshot(state)], []
    for _ in range(count):
        state, batch = ctx.impl.next_batch(state, ctx.data, batch_size, ctx.mesh)
        states.append(_snapshot(state))
        batches.append(batch)
    return states, batches


def _ids(batches) -> list[np.ndarray]:
    return [np.asarray(b.ids).astype(np.int64) for b in batches]


def _rows(ctx) -> int:
    return ctx.data.features.shape[0]


def _snapshot(state: dict) -> dict:
    return {name: np.array(value, copy=True) for name, value in state.items()}


def initial_state_fields(ctx):
    """initial(): six fields, zero replicated weights and momentum, a permutation, cursor and step 0."""
    state = ctx.impl.initial(ctx.seed, ctx.data, ctx.mesh)
    expect(set(FIELDS) <= set(state), list(FIELDS), sorted(state), "the state is the six fields of the course's table")
    width, rows = ctx.data.features.shape[1], _rows(ctx)
    for name in ("weights", "momentum"):
        value = np.asarray(state[name])
        expect(
            value.shape == (width,) and value.dtype == np.float32 and not value.any(),
            f"float32 zeros of shape ({width},)",
            f"{value.dtype}{value.shape}: {value}",
            f"{name} start as float32 zeros, one per feature",
        )
        wrong = sharding_of(state[name], ctx.mesh, P())
        expect(
            wrong is None,
            "NamedSharding(mesh, P()) over 4 devices",
            wrong,
            f"{name} live on the devices: replicate them with jax.device_put(x, NamedSharding(mesh, P()))",
        )
    key = np.asarray(state["key"])
    expect(
        key.shape == (2,) and key.dtype == np.uint32,
        "uint32 (2,)",
        f"{key.dtype}{key.shape}",
        "key is a legacy PRNG key: jax.random.PRNGKey(seed) then split",
    )
    order = np.asarray(state["order"])
    expect(
        sorted(order.tolist()) == list(range(rows)),
        f"a permutation of 0..{rows - 1}",
        order,
        "order holds every sample id exactly once",
    )
    counters = {"cursor": int(state["cursor"]), "step": int(state["step"])}
    return expect(counters == {"cursor": 0, "step": 0}, {"cursor": 0, "step": 0}, counters, "a new run starts at 0")


def first_order_follows_the_seed(ctx):
    """The first order and saved key follow split-then-permute, for two seeds."""
    rows = _rows(ctx)
    for seed in (ctx.seed, 29):
        state = ctx.impl.initial(seed, ctx.data, ctx.mesh)
        order, key = np.asarray(state["order"]), np.asarray(state["key"])
        recipe = oracle.idiom_epochs(seed, rows, 1)[0]
        kept, expected = np.asarray(recipe["key"], np.uint32), np.asarray(recipe["order"])
        if np.array_equal(order, np.asarray(jax.random.permutation(jax.random.PRNGKey(seed), rows))):
            cause = "the first permutation was drawn from the unsplit seed key -> split first"
        elif np.array_equal(order, np.asarray(jax.random.permutation(kept, rows))):
            cause = "the permutation was drawn with the kept half -> draw with the second half (subkey)"
        else:
            cause = "the order does not follow the course's recipe"
        expect(
            np.array_equal(order, expected),
            expected,
            order,
            f"seed {seed}: {cause}: key, subkey = jax.random.split(jax.random.PRNGKey(seed)); "
            "order = jax.random.permutation(subkey, n). Any two correct implementations replay the same ids.",
        )
        expect(
            np.array_equal(key, kept),
            kept,
            key,
            f"seed {seed}: the saved key is the first half of split(PRNGKey(seed)), kept for the next epoch",
        )
    return "split-then-permute orders for seeds 17 and 29", "equal"


def batch_lengths_keep_the_remainder(ctx):
    """Batch lengths over two epochs follow arithmetic: 23 in 7s -> 7, 7, 7, 2 (also 10s and 100s)."""
    rows = _rows(ctx)
    for batch_size in (ctx.batch_size, 10, 100):
        expected = epoch_batches(rows, batch_size) * 2
        _, batches = _run(ctx, ctx.seed, batch_size, len(expected))
        observed = [len(ids) for ids in _ids(batches)]
        if min(expected) < min(batch_size, rows) and all(n == batch_size for n in observed):
            cause = (
                f"the remainder batch was dropped -> the last batch of an epoch keeps the remainder "
                f"({rows} rows in {batch_size}s give {epoch_batches(rows, batch_size)}); dropping it silently "
                "changes the objective and the meaning of an epoch"
            )
        elif any(n > batch_size for n in observed):
            cause = "a batch is longer than batch_size -> take at most batch_size ids"
        else:
            cause = "a batch never crosses an epoch boundary: take the ids left in this epoch, then reshuffle"
        expect(observed == expected, expected, observed, f"batch size {batch_size}: {cause}")
    return "lengths from arithmetic for batch sizes 7, 10, 100", "equal"


def every_epoch_covers_every_id_once(ctx):
    """Each of three epochs holds every id exactly once."""
    rows, per_epoch = _rows(ctx), len(epoch_batches(_rows(ctx), ctx.batch_size))
    _, batches = _run(ctx, ctx.seed, ctx.batch_size, per_epoch * EPOCHS)
    covered = oracle.epoch_coverage(_ids(batches), rows, ctx.batch_size)
    return expect(
        covered == [True] * EPOCHS,
        [True] * EPOCHS,
        covered,
        "an epoch must hold every sample id exactly once (no id missing, none repeated): keep the remainder "
        "batch and reshuffle only when the order is used up",
    )


def _epoch_orders(ctx, batches) -> list[np.ndarray]:
    per_epoch = len(epoch_batches(_rows(ctx), ctx.batch_size))
    ids = _ids(batches)
    return [np.concatenate(ids[i : i + per_epoch]) for i in range(0, len(ids), per_epoch)]


def epochs_follow_the_course_order(ctx):
    """Three epochs of ids equal the recipe's orders: the saved key is split again at each new epoch."""
    per_epoch = len(epoch_batches(_rows(ctx), ctx.batch_size))
    _, batches = _run(ctx, ctx.seed, ctx.batch_size, per_epoch * EPOCHS)
    observed = _epoch_orders(ctx, batches)
    expected = [epoch["order"] for epoch in oracle.idiom_epochs(ctx.seed, _rows(ctx), EPOCHS)]
    wrong = [e for e in range(EPOCHS) if not np.array_equal(observed[e], expected[e])]
    if not wrong:
        return f"{EPOCHS} epochs of the recipe's orders", "equal"
    repeats = [e for e in range(1, EPOCHS) if np.array_equal(observed[e], observed[e - 1])]
    first = wrong[0]
    if sorted(observed[first].tolist()) != list(range(_rows(ctx))):
        cause = f"epoch {first} is not a permutation of the ids -> fix the batch lengths and coverage first"
    elif repeats:
        cause = (
            f"epoch {repeats[0]} repeats epoch {repeats[0] - 1}: the same key was used for every epoch -> at each "
            "new epoch split the saved key again (key, subkey = jax.random.split(key)) and draw with `subkey`"
        )
    elif first == 0:
        cause = "the first epoch does not follow the recipe (see first_order_follows_the_seed)"
    else:
        cause = (
            f"epoch {first} does not follow the recipe -> split the saved key again (key, subkey = "
            "jax.random.split(key)), keep `key` in the state and draw with `subkey`"
        )
    return expect(False, expected[first], observed[first], cause)


def key_changes_at_each_new_epoch(ctx):
    """The saved key stays put inside an epoch and changes exactly when a new permutation is drawn."""
    per_epoch = len(epoch_batches(_rows(ctx), ctx.batch_size))
    states, _ = _run(ctx, ctx.seed, ctx.batch_size, per_epoch * EPOCHS)
    keys = [np.asarray(s["key"]) for s in states]
    observed = [not np.array_equal(a, b) for a, b in zip(keys, keys[1:])]
    expected = [i > 0 and i % per_epoch == 0 for i in range(len(observed))]
    stuck = [i for i, (o, e) in enumerate(zip(observed, expected)) if e and not o]
    early = [i for i, (o, e) in enumerate(zip(observed, expected)) if o and not e]
    if stuck and not early:
        cause = (
            "the key did not change at a new epoch: one key reused for every epoch -> split the saved key again "
            "at each new epoch and keep the first half"
        )
    elif early and not stuck:
        cause = "the key changed inside an epoch -> split only when a new permutation is drawn"
    else:
        cause = "new epochs start at other calls than arithmetic says -> fix the batch lengths first"
    return expect(observed == expected, expected, observed, f"key changed after each next_batch call: {cause}")


def next_batch_returns_a_new_state(ctx):
    """next_batch leaves the caller's dict and arrays untouched, across an epoch boundary too."""
    per_epoch = len(epoch_batches(_rows(ctx), ctx.batch_size))
    state = ctx.impl.initial(ctx.seed, ctx.data, ctx.mesh)
    for call in range(per_epoch + 2):
        before = _snapshot(state)
        new, _ = ctx.impl.next_batch(state, ctx.data, ctx.batch_size, ctx.mesh)
        after = _snapshot(state)
        changed = sorted(set(before) ^ set(after)) + [
            name for name in before if name in after and not np.array_equal(before[name], after[name])
        ]
        expect(
            not changed and new is not state,
            "the input state unchanged and a new dict returned",
            f"call {call + 1}: input field(s) {changed} changed" if changed else f"call {call + 1}: the same dict",
            "next_batch mutated the caller's state -> build and return a new dict ({**state, ...}) with new "
            "arrays; never assign into the input (a caller may still hold it, e.g. to retry or compare)",
        )
        state = new
    return "input unchanged", "unchanged"


def next_batch_leaves_step_alone(ctx):
    """next_batch consumes examples only: step is unchanged (the update increments it)."""
    states, _ = _run(ctx, ctx.seed, ctx.batch_size, 3)
    steps = [int(s["step"]) for s in states]
    return expect(
        steps == [0, 0, 0, 0],
        [0, 0, 0, 0],
        steps,
        "next_batch changed step -> step counts optimiser updates; only the transition increments it, once "
        "per update (incrementing it in the sampler as well counts every update twice)",
    )


def replay_is_deterministic(ctx):
    """Two runs from one seed give identical ids; another seed gives other ids."""
    count = 2 * len(epoch_batches(_rows(ctx), ctx.batch_size)) + 1
    runs = [_ids(_run(ctx, seed, ctx.batch_size, count)[1]) for seed in (ctx.seed, ctx.seed, 29)]
    same = all(np.array_equal(a, b) for a, b in zip(runs[0], runs[1]))
    expect(same, "identical ids", "different ids", "the same seed must replay the same ids: no global RNG")
    differs = not all(np.array_equal(a, b) for a, b in zip(runs[0], runs[2]))
    return expect(differs, "different ids for seed 29", "identical ids", "the seed is ignored")


def padding_is_never_an_observation(ctx):
    """Rows padded to a multiple of 4; padded slots have mask 0; valid rows are the selected rows."""
    devices = ctx.mesh.size
    for batch_size, calls in ((ctx.batch_size, 4), (1, 1)):
        _, batches = _run(ctx, ctx.seed, batch_size, calls)
        for batch in batches:
            ids = np.asarray(batch.ids)
            mask = np.asarray(batch.mask)
            slots = -(-len(ids) // devices) * devices
            expected_mask = [1.0] * len(ids) + [0.0] * (slots - len(ids))
            expect(
                mask.tolist() == expected_mask,
                expected_mask,
                mask,
                f"{len(ids)} row(s) -> {slots} slots: a padded slot has mask 0 whatever its contents; padding is "
                "never an observation (mask 1 on padding counts it as one)",
            )
            counts = mask.reshape(devices, -1).sum(axis=1).astype(int).tolist()
            expect(
                counts == oracle.device_counts(len(ids), devices),
                oracle.device_counts(len(ids), devices),
                counts,
                "valid rows per device: pad at the end, to the next multiple of the device count",
            )
            valid = mask > 0
            same_rows = np.array_equal(np.asarray(batch.features)[valid], ctx.data.features[ids]) and np.array_equal(
                np.asarray(batch.targets)[valid], ctx.data.targets[ids]
            )
            expect(same_rows, "the rows and targets of batch.ids", "other rows", "rows must follow batch.ids")
    return "mask 1 on selected rows, 0 on padding; [2, 2, 2, 1] and [1, 0, 0, 0] per device", "as expected"


def batch_is_placed_on_the_mesh(ctx):
    """features on P('data', None), targets and mask on P('data'), over the four-device mesh."""
    _, (batch,) = _run(ctx, ctx.seed, ctx.batch_size, 1)
    specs = {"features": P(AXIS, None), "targets": P(AXIS), "mask": P(AXIS)}
    for name, spec in specs.items():
        wrong = sharding_of(getattr(batch, name), ctx.mesh, spec)
        expect(
            wrong is None,
            f"NamedSharding(mesh, {spec})",
            wrong,
            f"batch.{name} is not placed as the course says -> jax.device_put(x, NamedSharding(mesh, {spec})); "
            "a NumPy-only batch never reaches the devices",
        )
    return {k: str(v) for k, v in specs.items()}, "as expected"


CHECKS = (
    initial_state_fields,
    first_order_follows_the_seed,
    batch_lengths_keep_the_remainder,
    every_epoch_covers_every_id_once,
    epochs_follow_the_course_order,
    key_changes_at_each_new_epoch,
    next_batch_returns_a_new_state,
    next_batch_leaves_step_alone,
    replay_is_deterministic,
    padding_is_never_an_observation,
    batch_is_placed_on_the_mesh,
)
