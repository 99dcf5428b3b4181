"""Stage 1 checks: `initial` and `next_batch` against coverage arithmetic and the course's PRNG recipe.

The recipe is the specification: key = PRNGKey(seed); key, subkey = split(key);
order = permutation(subkey, n); at each new epoch split the saved key again.
"""

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

import shardlab.checker.causes as known_causes
import shardlab.checker.sampler_diagnosis as recipe
import shardlab.checker.search as search
from shardlab.checker.common import attempt, degenerate_data, expect, host, see, sharding_of, snapshot, typed_key
from shardlab.checker.formulas import mark
from shardlab.checker.padding import check_padding
from shardlab.checker.properties import BATCH_SPECS, new_result_each_call
from shardlab.core.state import FIELDS
from shardlab.verify import oracle
from shardlab.verify.oracle import epoch_batches

STAGE = 1
EPOCHS = 3


def _run(ctx, seed: int, batch_size: int, count: int, data=None) -> tuple[list, list]:
    """(states, batches): copies of `initial(seed)` and of the states after `count` next_batch calls."""
    data = ctx.data if data is None else data
    state = ctx.impl.initial(seed, data, ctx.mesh)
    states, batches = [snapshot(state)], []
    for _ in range(count):
        state, batch = ctx.impl.next_batch(state, data, batch_size, ctx.mesh)
        states.append(snapshot(state))
        batches.append(batch)
    return states, batches


def _ids(batches) -> list[np.ndarray]:
    return [np.asarray(b.ids).astype(np.int64) for b in batches]


def _one_call(ctx, state: dict, batch_size: int) -> tuple[dict, np.ndarray | None, str]:
    """(new state, ids, '') of one next_batch call on `state`, or ({}, None, the error) where it raised."""

    def call():
        after, batch = ctx.impl.next_batch(state, ctx.data, batch_size, ctx.mesh)
        return after, _ids([batch])[0]

    (after, ids), error = attempt(call, ({}, None))
    return after, ids, error


def _rows(ctx) -> int:
    return ctx.data.features.shape[0]


def _sampler_cause(ctx, seed: int, batch_size: int, calls: int) -> str | None:
    """The first sampler mistake a walk of `calls` next_batch calls shows, in the learner's terms."""
    states, batches = _run(ctx, seed, batch_size, calls)
    plan = oracle.walk(_rows(ctx), seed, batch_size, calls)
    observed = _ids(batches)
    return recipe.length_cause(_rows(ctx), batch_size, observed, plan) or recipe.state_cause(
        states, observed, plan, batch_size
    )


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
            known_causes.zeros_of(name, value, width),
        )
        wrong = sharding_of(state[name], ctx.mesh, P())
        expect(
            wrong is None,
            "NamedSharding(mesh, P()) over 4 devices",
            wrong,
            f"{name} live on the devices: replicate them with jax.device_put(x, NamedSharding(mesh, P()))"
            + known_causes.placement(wrong),
        )
    key = state["key"]
    typed = typed_key(key)
    expect(
        not typed,
        "uint32 (2,)",
        f"a typed key array of dtype {key.dtype}",
        "key is a typed PRNG key (jax.random.key) -> the state keeps the legacy uint32 (2,) key from "
        "jax.random.PRNGKey(seed), which a checkpoint stores as plain numbers" + mark(cause="typed-key"),
    )
    key = np.asarray(key)
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
    verdict = expect(counters == {"cursor": 0, "step": 0}, {"cursor": 0, "step": 0}, counters, "a new run starts at 0")
    new_result_each_call(ctx, "initial", ctx.seed, ctx.data, ctx.mesh, rule="initial-fields")
    return verdict


def first_order_follows_the_seed(ctx):
    """The first order and saved key follow split-then-permute, for two seeds."""
    rows = _rows(ctx)
    for seed in (ctx.seed, 29):
        state = ctx.impl.initial(seed, ctx.data, ctx.mesh)
        order, key = host(state["order"]), host(state["key"])
        recipe = oracle.idiom_epochs(seed, rows, 1)[0]
        kept, expected = np.asarray(recipe["key"], np.uint32), np.asarray(recipe["order"])
        again = host(ctx.impl.initial(seed, ctx.data, ctx.mesh)["order"])
        if not np.array_equal(order, again):
            cause = (
                "two calls with the same seed gave different orders: the order comes from a global or unseeded "
                "RNG (np.random, random) -> draw it from the key" + mark(cause="global-rng")
            )
        elif np.array_equal(order, np.asarray(jax.random.permutation(jax.random.PRNGKey(seed), rows))):
            cause = "the first permutation was drawn from the unsplit seed key -> split first" + mark(
                cause="unsplit-key"
            )
        elif np.array_equal(order, np.asarray(jax.random.permutation(kept, rows))):
            cause = "the permutation was drawn with the kept half -> draw with the second half (subkey)" + mark(
                cause="drawn-with-kept-half"
            )
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
    if not ctx.thorough:  # two million-row permutations (the learner's and the oracle's) cost ~1.5 s on two cores
        return "split-then-permute orders for seeds 17 and 29 (--thorough: also on 1,048,577 rows)", "equal"
    _first_order_at_a_large_row_count(ctx)
    return f"split-then-permute orders for seeds 17 and 29, and for {LARGE_ROWS:,} rows", "equal"


LARGE_ROWS = 2**20 + 1  # past any size a sampler might switch generators at (1e6, 2^20): one permutation, once


def _first_order_at_a_large_row_count(ctx) -> None:
    """initial on data of LARGE_ROWS rows x 1 feature gives the recipe's first order too: the rule holds at every
    row count, so a permutation drawn another way above some size (NumPy's generator, seeded by the subkey, "as
    jax.random.permutation is slow there") fails. The expected order is the oracle's NumPy Threefry recipe."""
    data = (np.zeros((LARGE_ROWS, 1), np.float32), np.zeros(LARGE_ROWS, np.float32))
    order = host(ctx.impl.initial(ctx.seed, data, ctx.mesh)["order"])
    expected = np.asarray(oracle.idiom_epochs(ctx.seed, LARGE_ROWS, 1)[0]["order"])
    if np.array_equal(order, expected):
        return
    permutation = order.shape == (LARGE_ROWS,) and np.array_equal(np.sort(order), np.arange(LARGE_ROWS))
    expect(
        False,
        f"permutation(subkey, {LARGE_ROWS:,}) starting {expected[:8].tolist()}",
        f"{order.dtype}{order.shape} starting {order[:8].tolist()}",
        f"seed {ctx.seed} on {LARGE_ROWS:,} rows: the first order "
        + ("is a permutation, but not the recipe's" if permutation else "is not a permutation of the rows")
        + mark(cause="order-by-row-count")
        + f", where on {_rows(ctx)} rows it was: the order is drawn another way at a large row count (another "
        "generator or method above some size) -> draw it with jax.random.permutation(subkey, n) whatever n is; "
        "any two correct implementations replay the same ids on any data" + mark("split-then-permute"),
    )


def batch_lengths_keep_the_remainder(ctx):
    """Batch lengths over two epochs follow arithmetic: 23 in 7s -> 7, 7, 7, 2 (also 9s, 10s and 100s)."""
    rows = _rows(ctx)
    for batch_size in (ctx.batch_size, 9, 10, 100):
        expected = epoch_batches(rows, batch_size) * 2
        _, batches = _run(ctx, ctx.seed, batch_size, len(expected))
        observed = _ids(batches)
        plan = oracle.walk(rows, ctx.seed, batch_size, len(expected))
        cause = recipe.length_cause(rows, batch_size, observed, plan)
        lengths = [len(ids) for ids in observed]
        expect(lengths == expected, expected, lengths, f"batch size {batch_size}: {cause}")
    _one_batch_for_a_huge_batch_size(ctx)
    return "lengths from arithmetic for batch sizes 7, 9, 10, 100 and 2**40", "equal"


HUGE_BATCH = 2**40  # a legal batch size: the remainder rule makes it one batch of every row, whatever the row count


def _one_batch_for_a_huge_batch_size(ctx) -> None:
    """A batch size far beyond the rows (2**40) is legal: the epoch is one batch of every id, in the recipe's
    order. Work sized by batch_size instead of the ids taken (a buffer, an arange) cannot be done."""
    rows, state = _rows(ctx), ctx.impl.initial(ctx.seed, ctx.data, ctx.mesh)
    expected = np.asarray(oracle.idiom_epochs(ctx.seed, rows, 1)[0]["order"]).astype(np.int64)
    _, observed, error = _one_call(ctx, state, HUGE_BATCH)
    expect(
        observed is not None and np.array_equal(observed, expected),
        f"one batch of all {rows} ids in the recipe's order (batch size 2**40 on {rows} rows)",
        error or observed,
        (
            f"batch size 2**40 on {rows} rows raised {error.split(':')[0]}: the batch is the {rows} ids left in "
            "the epoch, so nothing needs room for batch_size -> size every buffer and range by the ids taken "
            "(min(batch_size, rows - cursor)), padded to the device count, never by batch_size"
            if error
            else f"batch size 2**40 on {rows} rows gave {len(observed)} ids -> the batch is every id left in the "
            "epoch (the remainder, whatever its size)"
        )
        + mark("remainder", cause="sized-by-batch-size"),
    )


def every_epoch_covers_every_id_once(ctx):
    """Each of three epochs holds every id exactly once."""
    rows, per_epoch = _rows(ctx), len(epoch_batches(_rows(ctx), ctx.batch_size))
    _, batches = _run(ctx, ctx.seed, ctx.batch_size, per_epoch * EPOCHS)
    covered = oracle.epoch_coverage(_ids(batches), rows, ctx.batch_size)
    if covered == [True] * EPOCHS:
        return [True] * EPOCHS, covered
    cause = _sampler_cause(ctx, ctx.seed, ctx.batch_size, per_epoch * EPOCHS)
    return expect(
        False,
        [True] * EPOCHS,
        covered,
        "an epoch must hold every sample id exactly once (no id missing, none repeated): "
        + (cause or "keep the remainder batch and reshuffle only when the order is used up"),
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
    first = wrong[0]
    cause = _sampler_cause(ctx, ctx.seed, ctx.batch_size, per_epoch * EPOCHS)
    if cause is None and first == 0:
        cause = "the first epoch does not follow the recipe" + see(ctx, "first_order_follows_the_seed")
    cause = cause or f"epoch {first} does not follow the recipe"
    return expect(False, expected[first], observed[first], cause)


def key_changes_at_each_new_epoch(ctx):
    """The saved key stays put inside an epoch and changes exactly when a new permutation is drawn."""
    per_epoch = len(epoch_batches(_rows(ctx), ctx.batch_size))
    calls = per_epoch * EPOCHS
    states, _ = _run(ctx, ctx.seed, ctx.batch_size, calls)
    keys = [np.asarray(s["key"]) for s in states]
    observed = [not np.array_equal(a, b) for a, b in zip(keys, keys[1:])]
    lazy = [i > 0 and i % per_epoch == 0 for i in range(calls)]  # drawn when the next call finds the epoch used up
    eager = [i % per_epoch == per_epoch - 1 for i in range(calls)]  # drawn as soon as the last batch is taken
    if observed in (lazy, eager):
        return lazy, observed
    if not any(observed):
        cause = "the key never changed: one key reused for every epoch -> split the saved key at each new epoch"
        cause += mark("reshuffle", cause="key-reused")
    else:
        cause = _sampler_cause(ctx, ctx.seed, ctx.batch_size, calls) or (
            "the key changed at other calls than a new epoch -> split only when a new permutation is drawn"
            + mark("reshuffle")
        )
    return expect(False, lazy, observed, f"key changed after each next_batch call: {cause}")


def sampler_fields_follow_the_arithmetic(ctx):
    """After every next_batch call, cursor, order and key equal coverage arithmetic and the recipe."""
    rows = _rows(ctx)
    for batch_size in (ctx.batch_size, 9):
        calls = 2 * len(epoch_batches(rows, batch_size)) + 1
        states, batches = _run(ctx, ctx.seed, batch_size, calls)
        plan = oracle.walk(rows, ctx.seed, batch_size, calls)
        bad = [c for c, w in enumerate(plan) if not recipe.follows(states[c + 1], w)]
        if bad:
            first = bad[0]
            observed = {n: states[first + 1].get(n) for n in ("cursor", "key", "order")}
            observed_ids = _ids(batches)
            cause = recipe.length_cause(rows, batch_size, observed_ids, plan) or recipe.state_cause(
                states, observed_ids, plan, batch_size
            )
            expect(False, plan[first]["after"], observed, f"batch size {batch_size}, after call {first + 1}: {cause}")
    _continues_from_a_lazy_epoch_end(ctx)
    return (
        "cursor = ids consumed this epoch, the epoch's order and key, after every call (batch sizes 7, 9), "
        "also from a state at an epoch's end in the lazy form (cursor == rows)",
        "equal",
    )


def _continues_from_a_lazy_epoch_end(ctx) -> None:
    """A state whose cursor is already `rows` (the lazy form rule:cursor accepts, which another correct sampler or
    a checkpoint of one hands over) starts the next epoch: ids, key and order as the recipe's, built here from
    the recipe alone, whatever form this sampler itself leaves at an epoch's end."""
    rows, batch_size = _rows(ctx), ctx.batch_size
    per_epoch = len(epoch_batches(rows, batch_size))
    plan = oracle.walk(rows, ctx.seed, batch_size, per_epoch + 1)
    start = ctx.impl.initial(ctx.seed, ctx.data, ctx.mesh)
    first = oracle.idiom_epochs(ctx.seed, rows, 1)[0]
    given = dict(start)
    given["key"] = np.asarray(first["key"], np.asarray(start["key"]).dtype)
    given["order"] = np.asarray(first["order"], np.asarray(start["order"]).dtype)
    given["cursor"] = np.asarray(rows, np.asarray(start["cursor"]).dtype)
    want = plan[per_epoch]
    after, observed, error = _one_call(ctx, given, batch_size)
    right = observed is not None and np.array_equal(observed, want["ids"])
    expect(
        right and recipe.follows(snapshot(after), want),
        {"ids": want["ids"], **want["after"]},
        error or {"ids": observed, **{n: host(after.get(n)) for n in ("cursor", "key", "order")}},
        f"given a state at the end of epoch 0 in the lazy form (cursor {rows} == rows, epoch 0's key and order), "
        + (
            f"next_batch raised {error.split(':')[0]}"
            if error
            else f"next_batch returned {len(observed)} ids where the recipe starts epoch 1 with {len(want['ids'])}"
            if not right
            else "next_batch returned the right ids but not the fields of epoch 1"
        )
        + ": this sampler may reshuffle eagerly itself, but a cursor of rows is a valid state (a lazy sampler's, or "
        "a checkpoint of one) -> when the cursor is rows, draw the next epoch first (split the saved key, permute "
        "with the second half, cursor 0), then take the batch" + mark("cursor", "reshuffle", cause="no-lazy-epoch-end"),
    )


def next_batch_returns_a_new_state(ctx):
    """next_batch leaves the caller's dict and arrays untouched, across an epoch boundary too."""
    per_epoch = len(epoch_batches(_rows(ctx), ctx.batch_size))
    state = ctx.impl.initial(ctx.seed, ctx.data, ctx.mesh)
    for call in range(per_epoch + 2):
        before, objects = snapshot(state), dict(state)
        new, _ = ctx.impl.next_batch(state, ctx.data, ctx.batch_size, ctx.mesh)
        after = snapshot(state)
        changed = sorted(set(before) ^ set(after)) + [
            name for name in before if name in after and not np.array_equal(before[name], after[name])
        ]
        in_place = [name for name in changed if name in state and state[name] is objects.get(name)]
        if in_place:
            how = (
                f"the array(s) {in_place} were changed in place (order[...] = , np.random.shuffle, +=) -> copy an "
                "array before changing it" + mark(cause="arrays-changed-in-place")
            )
        else:
            how = "entries of the caller's dict were replaced (state[...] = or state.update)" + mark(
                cause="dict-entries-replaced"
            )
        expect(
            not changed and new is not state,
            "the input state unchanged and a new dict returned",
            f"call {call + 1}: input field(s) {changed} changed" if changed else f"call {call + 1}: the same dict",
            f"next_batch mutated the caller's state: {how}; build and return a new dict ({{**state, ...}}) with new "
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
        "per update (incrementing it in the sampler as well counts every update twice)" + mark(cause="step-in-sampler"),
    )


def replay_is_deterministic(ctx):
    """Two runs from one seed give identical ids; another seed gives other ids."""
    count = 2 * len(epoch_batches(_rows(ctx), ctx.batch_size)) + 1
    runs = [_ids(_run(ctx, seed, ctx.batch_size, count)[1]) for seed in (ctx.seed, ctx.seed, 29)]
    same = all(np.array_equal(a, b) for a, b in zip(runs[0], runs[1]))
    expect(
        same,
        "identical ids",
        "different ids",
        "the same seed must replay the same ids: no global RNG" + mark(cause="global-rng"),
    )
    differs = not all(np.array_equal(a, b) for a, b in zip(runs[0], runs[2]))
    return expect(differs, "different ids for seed 29", "identical ids", "the seed is ignored")


def padding_is_never_an_observation(ctx):
    """Rows padded to a multiple of 4, padded slots have mask 0 and finite values; valid rows are the selected rows."""
    for batch_size, calls in ((ctx.batch_size, 4), (1, 1)):
        _, batches = _run(ctx, ctx.seed, batch_size, calls)
        for batch in batches:
            check_padding(batch, ctx.data, batch_size, ctx.mesh.size)
    return "mask 1 on selected rows, 0 on padding; [2, 2, 2, 1] and [1, 0, 0, 0] per device", "as expected"


def padding_is_decided_by_position(ctx):
    """Degenerate rows (zeros, duplicates, large, equal to padding) keep mask 1; slots pad to a multiple of 4.

    Batch sizes 9 and 1 over one epoch give [3, 3, 3, 0], [2, 2, 1, 0] and [1, 0, 0, 0]: devices with
    several padded slots and no valid row.
    """
    data = degenerate_data(ctx.data)
    for batch_size in (9, 1):
        _, batches = _run(ctx, ctx.seed, batch_size, len(epoch_batches(_rows(ctx), batch_size)), data)
        for batch in batches:
            check_padding(batch, data, batch_size, ctx.mesh.size)
    return "mask by position for degenerate rows; [3, 3, 3, 0], [2, 2, 1, 0], [1, 0, 0, 0] per device", "as expected"


def batch_is_placed_on_the_mesh(ctx):
    """features on P('data', None), targets and mask on P('data'), over the four-device mesh."""
    _, (batch,) = _run(ctx, ctx.seed, ctx.batch_size, 1)
    for name, spec in BATCH_SPECS.items():
        wrong = sharding_of(getattr(batch, name), ctx.mesh, spec)
        expect(
            wrong is None,
            f"NamedSharding(mesh, {spec})",
            wrong,
            f"batch.{name} is not placed as the course says -> jax.device_put(x, NamedSharding(mesh, {spec})); "
            "a NumPy-only batch never reaches the devices" + known_causes.placement(wrong),
        )
    return {k: str(v) for k, v in BATCH_SPECS.items()}, "as expected"


CHECKS = (
    initial_state_fields,
    first_order_follows_the_seed,
    batch_lengths_keep_the_remainder,
    every_epoch_covers_every_id_once,
    epochs_follow_the_course_order,
    key_changes_at_each_new_epoch,
    sampler_fields_follow_the_arithmetic,
    next_batch_returns_a_new_state,
    next_batch_leaves_step_alone,
    replay_is_deterministic,
    padding_is_never_an_observation,
    padding_is_decided_by_position,
    batch_is_placed_on_the_mesh,
    *search.checks_for(STAGE),
)
