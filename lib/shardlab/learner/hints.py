"""Hints in layers for the seven functions: from a nudge to the full recipe, opened on purpose.

`HINTS[function]` is a list of levels; level 1 is a nudge, the last level is the full recipe. The
starter states the rules (shardlab.learner.rules) and never the how; the how is here, served by
`python -m shardlab hint FUNCTION [LEVEL]` and shown, folded, in the notebook that teaches the
function (tests/test_learner_loop.py renders that cell from `HINTS` and checks it).
"""

import sys

from shardlab.errors import UsageError
from shardlab.learner.rules import FUNCTIONS, TAUGHT_IN

HINTS = {
    "initial": [
        "Everything random in the run comes from one key made from the seed; the state keeps one half of a split "
        "and the other half is spent at once.",
        "Unpack the data as a pair (features, targets = data) so a tuple works too; the order is a permutation of "
        "the row ids drawn from the spent half; weights and momentum are zeros placed on the mesh, replicated.",
        "key, subkey = jax.random.split(jax.random.PRNGKey(seed)); order = jax.random.permutation(subkey, n). "
        "Replicate with jax.device_put(x, NamedSharding(mesh, P())). Keep the key as the legacy uint32 (2,) array, "
        "on the host (np.asarray).",
        "Full recipe: features, targets = data; n, d = features.shape; key, subkey = jax.random.split("
        "jax.random.PRNGKey(seed)); order = jax.random.permutation(subkey, n); zeros = jnp.zeros(d, jnp.float32); "
        "replicated = NamedSharding(mesh, P()); return {'weights': jax.device_put(zeros, replicated), 'momentum': "
        "jax.device_put(zeros, replicated), 'key': np.asarray(key), 'order': np.asarray(order), 'cursor': 0, "
        "'step': 0}: key and order are host NumPy arrays, only weights and momentum are placed.",
    ],
    "next_batch": [
        "Work out on paper what 23 rows in batches of 7 give per call, and what the cursor is after each call; "
        "then what changes when the order is used up.",
        "Reshuffle only when the cursor has reached the end of the order (split the saved key again, new "
        "permutation, cursor 0). Take order[cursor : cursor + batch_size]: at the end of an epoch that is the "
        "shorter remainder. Move the cursor by the number of ids taken.",
        "Pad to the smallest multiple of mesh.size that holds the rows (-(-rows // devices) * devices); the mask "
        "is 1.0 for the first `rows` slots, 0.0 after, whatever the values. Place features with "
        "NamedSharding(mesh, P(AXIS, None)), targets and mask with P(AXIS) (AXIS = 'data', the starter's name for "
        "the mesh axis).",
        "Full recipe: copy the fields you change; if cursor == n: key, subkey = jax.random.split(key); order = "
        "jax.random.permutation(subkey, n); key, order = np.asarray(key), np.asarray(order) (they stay on the "
        "host); cursor = 0. ids = order[cursor:cursor + batch_size]; slots = "
        "-(-len(ids) // mesh.size) * mesh.size; fill host arrays of `slots` rows (zeros after the ids) and a mask "
        "with 1.0 on the first len(ids); device_put each with its sharding; return ({**state, 'key': key, "
        "'order': order, 'cursor': cursor + len(ids)}, Batch(features, targets, mask, ids)). Leave 'step' alone.",
    ],
    "make_step": [
        "Write the loss and gradient of the whole batch first as sums over rows; then ask what each device can "
        "add up on its own rows, and what must cross devices before the division.",
        "Each device computes three sums on its rows: its valid count, 2 * sum m_i x_i r_i and sum m_i r_i^2 "
        "(r_i = x_i.w - y_i, padding selected out with the mask). Add each over the devices, then divide once "
        "by the global count: never average per-device means.",
        "Inside jax.shard_map over AXIS (= 'data', the mesh axis), jax.lax.psum the three sums. in_specs "
        "(P(AXIS, None), P(AXIS), P(AXIS), P(), P()); out_specs P() for all four outputs. Loss first, then "
        "v <- decay * v + grad, w <- w - "
        "learning_rate * v with the arguments make_step was given.",
        "Full recipe: def body(x, y, m, w, v): valid = m > 0; r = jnp.where(valid, x @ w - y, 0.0); n = "
        "psum(sum(valid)); g = psum(2 * jnp.where(valid[:, None], x, 0).T @ r) / n; loss = psum(r @ r) / n; v = "
        "decay * v + g; return w - learning_rate * v, v, loss, g. mapped = jax.shard_map(body, mesh=mesh, "
        "in_specs=..., out_specs=P()); return jax.jit(mapped) if compiled else mapped.",
    ],
    "transition": [
        "A transition is the two things you already wrote, in order, and one counter.",
        "Call next_batch, then the step you are given on the batch's arrays and the state's weights and momentum; "
        "never build a step yourself (the caller's may carry another learning rate).",
        "Full recipe: state, batch = next_batch(state, data, batch_size, mesh); w, v, loss, _ = step("
        "batch.features, batch.targets, batch.mask, state['weights'], state['momentum']); return {**state, "
        "'weights': w, 'momentum': v, 'step': state['step'] + 1}, float(loss), np.asarray(batch.ids).",
    ],
    "contract": [
        "Ask what, if it differed, would make a resumed run a different experiment; all of it goes in, as plain data.",
        "Seed, batch size, feature width, learning rate, decay, device count, the data's shapes and dtypes, and a "
        "hash of every byte of features and targets; nothing that differs between two processes.",
        "Full recipe: features, targets = data; return {'schema_version': 1, 'features_shape': "
        "list(features.shape), 'features_dtype': features.dtype.str, 'targets_shape': list(targets.shape), "
        "'targets_dtype': targets.dtype.str, 'data_sha256': hashlib.sha256(features.tobytes() + "
        "targets.tobytes()).hexdigest(), 'seed': int(config.seed), 'batch_size': int(config.batch_size), "
        "'num_features': int(features.shape[1]), 'learning_rate': float(config.learning_rate), 'decay': "
        "float(config.decay), 'num_devices': int(config.num_devices)}: the keys the notebook prints, floats kept "
        "exact (never rounded).",
    ],
    "save": [
        "A reader must see either no checkpoint or a complete one, and two savers must never both win: think "
        "about which file operations can fail if the name is already taken.",
        "Write to a temporary file in the same folder as `path` with a name of its own (tempfile.mkstemp("
        "dir=folder)), flush and os.fsync it, then publish it under `path` with os.link, which fails if the name "
        "exists; remove the temporary file in every case. The fsync puts the bytes on disk before the name appears "
        "(an fsync of the folder makes the name itself durable: needed for durability, not sufficient); the "
        "temporary file sits beside `path` because a link works only within one file system, and its fresh name "
        "means a save killed midway blocks no later one.",
        "np.savez appends .npz to a name without it unless you give it an open file: write through the file "
        "object mkstemp gives. Store the contract as a JSON string and the arrays as NumPy copies so "
        "np.load(path, allow_pickle=False) reads everything. Refuse an existing path with "
        "errors.CheckpointExistsError; never os.replace (it overwrites a checkpoint published meanwhile).",
        "Full recipe: if os.path.exists(path): raise errors.CheckpointExistsError(path); folder = "
        "os.path.dirname(os.path.abspath(path)); fd, tmp = tempfile.mkstemp(dir=folder); try: with os.fdopen(fd, "
        "'wb') as f: np.savez(f, **{name: np.asarray(host(state[name])) ...}, contract=json.dumps(contract_)); "
        "f.flush(); os.fsync(f.fileno()); try: os.link(tmp, path) except FileExistsError: raise "
        "errors.CheckpointExistsError(path); finally: os.unlink(tmp). Return path.",
    ],
    "restore": [
        "Trust nothing in the file until you have compared what it claims to be with what this run is.",
        "Open with np.load(path, allow_pickle=False) and turn any read error into errors.CorruptCheckpointError; "
        "parse the contract and compare it with expected_contract with == (errors.ContractMismatchError) before "
        "looking at any array.",
        "Then check each field: weights and momentum float32 (d,) and finite; key uint32 (2,); order integer ids "
        "forming a permutation of 0..rows-1; cursor and step single integers, 0 <= cursor <= rows, step >= 0. "
        "Replicate weights and momentum with NamedSharding(mesh, P()).",
        "Full recipe: try: with np.load(path, allow_pickle=False) as z: fields = {k: z[k] for k in z.files} "
        "except Exception: raise errors.CorruptCheckpointError; saved = json.loads(str(fields['contract'])); if "
        "saved != expected_contract: raise errors.ContractMismatchError; validate every field as the rules say; "
        "return {'weights': jax.device_put(w, NamedSharding(mesh, P())), 'momentum': ..., 'key': key, 'order': "
        "order, 'cursor': int(cursor), 'step': int(step)}.",
    ],
}


def levels(function: str) -> int:
    return len(HINTS[function])


def hint(function: str, level: int | None = None) -> str:
    """Hint `level` (1-based; None: level 1) of `function`, or UsageError naming what exists."""
    if function not in HINTS:
        raise UsageError(f"no hints for {function!r}; functions: {', '.join(FUNCTIONS)}")
    level = 1 if level is None else level
    if not 1 <= level <= levels(function):
        raise UsageError(f"{function} has hint levels 1 to {levels(function)}, not {level}")
    last = " (the full recipe)" if level == levels(function) else ""
    return f"{function}, hint {level} of {levels(function)}{last}: {HINTS[function][level - 1]}"


def add_arguments(parser) -> None:
    parser.add_argument("function", help=f"one of {', '.join(FUNCTIONS)}")
    parser.add_argument("level", nargs="?", default=None, help="1 (a nudge) up to the full recipe; default 1")


def main(args) -> int:
    try:
        level = None if args.level is None else int(args.level)
    except ValueError:
        print(f"[shardlab hint] the level is a whole number, not {args.level!r}", file=sys.stderr)
        return 2
    try:
        text = hint(args.function, level)
    except UsageError as exc:
        print(f"[shardlab hint] {exc}", file=sys.stderr)
        return 2
    print(text)
    more = level is None or level < levels(args.function)
    if more:
        print(
            f"(taught in notebooks/{TAUGHT_IN[args.function]}; next: python -m shardlab hint {args.function} "
            f"{(level or 1) + 1})"
        )
    return 0
