"""My shardlab implementation: replace each `raise` with code, one stage at a time.

Each function's docstring says what it must return and the rules it must keep: each rule has an id
(`rule:...`), the notebook that teaches the function states the same rule under the same id, and a
failing check names the rules it enforces. The docstrings do not say how; when you are stuck, open the
hints in layers, a nudge first and the full recipe last, folded in the notebook or from a terminal:

    python -m shardlab hint next_batch        # level 1; add 2, 3, ... for more

After each stage, check it (stages are cumulative: stage 2 re-checks stage 1; ONLY=1 checks just one):

    python -m shardlab check --implementation THIS_FILE --stage 1      (or: make check IMPL=THIS_FILE STAGE=1)

and run the notebooks against it with `make run IMPL=THIS_FILE`. Keep the signatures: the notebooks and
the checker call these seven functions by name.

Rules for every function: the checker tries your code on many configurations (1 to 64 rows, 1 to 9
features, any batch size up to rows + 2, meshes of 1 to 4 devices, any seed, other learning rates and
decays, jitted and un-jitted steps, data as the course's Dataset or a plain (features, targets) tuple),
not only the course's 23 rows in batches of 7. No function changes what it is given: not the state dict,
not its arrays (their values, type or placement on the devices), not the data or the contract. Each call
must return within 20 s and use less than 2 GB; what your code prints goes to a log, and more than 5 MB
of it stops the run.
"""

import hashlib
import json
import os
import tempfile

import jax  # noqa: F401  (these imports are the ones you will need)
import jax.numpy as jnp  # noqa: F401
import numpy as np
from jax.sharding import Mesh, NamedSharding  # noqa: F401
from jax.sharding import PartitionSpec as P  # noqa: F401

from shardlab import errors  # noqa: F401  (CheckpointExistsError, ContractMismatchError, EmptyBatchError, ...
from shardlab.core.batch import Batch  # noqa: F401  (the container next_batch returns: features, targets, mask, ids)
from shardlab.core.config import DECAY, LEARNING_RATE, Config

AXIS = "data"  # the mesh axis name


def _todo(function: str, stage: int, what: str) -> NotImplementedError:
    """The error every placeholder raises: which function, which stage, what it returns, where the hints are."""
    return NotImplementedError(
        f"{function}: not implemented yet (stage {stage}): {what}; its rules are in its docstring ({__file__}), "
        f"hints: python -m shardlab hint {function}"
    )


# ---------------------------------------------------------------- stage 1: the next batch is explicit


def initial(seed: int, data, mesh: Mesh) -> dict:
    """Return the state at step 0: a dict of the six fields weights, momentum, key, order, cursor, step.

    Rules:
    - rule:initial-fields: the state is the six fields: float32 zero weights and momentum of shape (d,), the legacy
      uint32 (2,) key, the first order (a permutation of 0..n-1), cursor 0 and step 0.
    - rule:split-then-permute: the first order comes from PRNGKey(seed) split once: the first half is kept in the
      state, the second draws the permutation; the same seed replays the same ids, another seed others.
    - rule:replicated: weights and momentum live on every device of the mesh, replicated (NamedSharding(mesh, P())).
    - rule:plain-tuple-data: data is any (features, targets) pair of float32 arrays: the course's Dataset or a plain
      tuple.
    - rule:any-mesh: the mesh may hold 1, 2, 3 or 4 devices; nothing may assume four.
    """
    features, targets = data
    features = np.asarray(features)
    n, d = features.shape
    key, subkey = jax.random.split(jax.random.PRNGKey(seed))
    order = np.asarray(jax.random.permutation(subkey, n))
    replicated = NamedSharding(mesh, P())
    zeros = np.zeros(d, np.float32)
    return {
        "weights": jax.device_put(zeros, replicated),
        "momentum": jax.device_put(zeros, replicated),
        "key": np.asarray(key),
        "order": order,
        "cursor": 0,
        "step": 0,
    }


def next_batch(state: dict, data, batch_size: int, mesh: Mesh) -> tuple[dict, Batch]:
    """Return (new state, Batch(features, targets, mask, ids)): the next ids of the epoch, padded and placed.

    Rules:
    - rule:remainder: a batch never crosses an epoch boundary: the last batch of an epoch is the remainder, whatever
      its size, one id included; every epoch holds every id exactly once.
    - rule:reshuffle: a new epoch splits the saved key again and draws its order with the second half; the key
      changes exactly then, and the new order is kept in the state.
    - rule:cursor: the cursor is the position of the next unread id in the order: it moves by the number of ids
      taken.
    - rule:pad-by-position: rows are padded to the smallest multiple of the device count that holds them; the mask
      is 1 on the selected rows and 0 on padded slots, decided by position, never by values.
    - rule:placed-batch: features are placed with P('data', None), targets and mask with P('data'), on the mesh
      given.
    - rule:new-state: a new state dict is returned; the caller's dict and its arrays are never changed, and step is
      left alone.
    """
    features, targets = data
    features = np.asarray(features)
    targets = np.asarray(targets)
    n = features.shape[0]
    key = state["key"]
    order = state["order"]
    cursor = int(state["cursor"])
    if cursor >= n:
        key, subkey = jax.random.split(jnp.asarray(key))
        order = np.asarray(jax.random.permutation(subkey, n))
        key = np.asarray(key)
        cursor = 0
    ids = np.asarray(order[cursor : cursor + batch_size])
    rows = len(ids)
    devices = mesh.size
    slots = -(-rows // devices) * devices
    batch_features = np.zeros((slots, features.shape[1]), np.float32)
    batch_targets = np.zeros(slots, np.float32)
    mask = np.zeros(slots, np.float32)
    batch_features[:rows] = features[ids]
    batch_targets[:rows] = targets[ids]
    mask[:rows] = 1.0
    rows_sharding = NamedSharding(mesh, P(AXIS, None))
    slot_sharding = NamedSharding(mesh, P(AXIS))
    batch = Batch(
        jax.device_put(batch_features, rows_sharding),
        jax.device_put(batch_targets, slot_sharding),
        jax.device_put(mask, slot_sharding),
        ids,
    )
    new_state = {**state, "key": key, "order": order, "cursor": cursor + rows}
    return new_state, batch


# ---------------------------------------------------------------- stage 2: the global update


def make_step(mesh: Mesh, learning_rate: float = LEARNING_RATE, decay: float = DECAY, compiled: bool = True):
    """Return step(features, targets, mask, weights, momentum) -> (new weights, new momentum, loss, gradient).

    Rules:
    - rule:global-mean: loss and gradient are the global masked means: summed over devices, divided once by the
      global valid count, so padding and empty devices add exact zeros and the device count changes nothing.
    - rule:loss-before-update: the loss reported is the loss at the weights the gradient was taken at, before the
      update.
    - rule:momentum: v <- decay*v + g, then w <- w - learning_rate*v, on the global gradient, with the learning rate
      and decay make_step was given; every replica ends with the same weights.
    - rule:sharded-step: the compiled step is a jax.jit around a shard_map whose lowered program holds a real
      collective.
    - rule:eager-step: compiled=False returns the same mapped body without jit, with the same numbers.
    """

    def body(features, targets, mask, weights, momentum):
        valid = mask > 0
        safe_features = jnp.where(valid[:, None], features, 0.0)
        residual = jnp.where(valid, safe_features @ weights - targets, 0.0)
        count = jax.lax.psum(jnp.sum(mask), AXIS)
        loss_num = jax.lax.psum(jnp.sum(residual**2), AXIS)
        grad_num = jax.lax.psum(safe_features.T @ residual, AXIS)
        loss = loss_num / count
        grad = 2.0 * grad_num / count
        new_momentum = decay * momentum + grad
        new_weights = weights - learning_rate * new_momentum
        return new_weights, new_momentum, loss, grad

    mapped = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(P(AXIS, None), P(AXIS), P(AXIS), P(), P()),
        out_specs=(P(), P(), P(), P()),
    )
    if compiled:
        return jax.jit(mapped)
    return mapped


def transition(state: dict, data, batch_size: int, step, mesh: Mesh) -> tuple[dict, float, np.ndarray]:
    """Return (new state, the loss before the update, the ids of the batch): one batch, one update.

    Rules:
    - rule:one-update: one transition is one next_batch and one call of the step it is given (never one it builds),
      step + 1.
    - rule:input-intact: the caller's state stays readable and unchanged: no donated or reused buffers.
    """
    new_state, batch = next_batch(state, data, batch_size, mesh)
    weights, momentum, loss, _ = step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])
    new_state = {**new_state, "weights": weights, "momentum": momentum, "step": int(state["step"]) + 1}
    return new_state, float(loss), batch.ids


# ---------------------------------------------------------------- stage 3: a fresh process continues


def contract(data, config: Config) -> dict:
    """Return everything that must match for a checkpoint to continue *this* experiment, as plain data.

    Rules:
    - rule:contract-pins: the contract changes with the seed, batch size, learning rate, decay, device count,
      shapes, dtypes and every byte of the data.
    - rule:contract-exact: every entry is exact: a learning rate or decay one float32 step apart is another
      experiment.
    - rule:contract-json: the contract is plain JSON data, equal for equal inputs in any process (no process id,
      time or path).
    """
    features, targets = data
    features = np.ascontiguousarray(features)
    targets = np.ascontiguousarray(targets)
    digest = hashlib.sha256()
    for array in (features, targets):
        digest.update(str(array.dtype).encode())
        digest.update(repr(array.shape).encode())
        digest.update(array.tobytes())
    return {
        "seed": int(config.seed),
        "batch_size": int(config.batch_size),
        "learning_rate": float(config.learning_rate),
        "decay": float(config.decay),
        "num_devices": int(config.num_devices),
        "features_shape": list(features.shape),
        "targets_shape": list(targets.shape),
        "features_dtype": str(features.dtype),
        "targets_dtype": str(targets.dtype),
        "data_sha256": digest.hexdigest(),
    }


def save(path, state: dict, contract_: dict) -> str:
    """Write the six fields and the contract to a new checkpoint at `path`; return `path`.

    Rules:
    - rule:plain-npz: all six fields and the contract go into one NPZ that np.load(path, allow_pickle=False) reads.
    - rule:exact-path: the checkpoint is written at exactly the path given (any name: no .npz added) and that path
      is returned.
    - rule:never-overwrite: a path that exists is refused with errors.CheckpointExistsError and its bytes are left
      untouched.
    - rule:new-temp-name: bytes go first to a temporary file in the same folder, with a new name for every save, so
      a save killed midway never blocks the next one; nothing but the checkpoint is left behind.
    - rule:fsync-before-publish: the temporary file is flushed and fsynced after its last write and only then
      published, so a published name never points at bytes still in memory.
    - rule:exclusive-publish: the finished file is published with an operation that fails if the name exists (an
      exclusive link): of two savers in two processes racing for one name exactly one wins.
    - rule:save-inputs-intact: save changes nothing it is given: not the state, its arrays or their placement.
    """
    path = os.fspath(path)
    if os.path.exists(path):
        raise errors.CheckpointExistsError(f"{path} already exists: choose a new name, a checkpoint is never replaced")
    arrays = {
        "weights": np.asarray(state["weights"]),
        "momentum": np.asarray(state["momentum"]),
        "key": np.asarray(state["key"]),
        "order": np.asarray(state["order"]),
        "cursor": np.asarray(int(state["cursor"]), np.int64),
        "step": np.asarray(int(state["step"]), np.int64),
        "contract": np.asarray(json.dumps(contract_, sort_keys=True)),
    }
    folder = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **arrays)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temp, path)
        except FileExistsError:
            raise errors.CheckpointExistsError(f"{path} was published by another saver meanwhile") from None
    finally:
        os.unlink(temp)
    return path


def restore(path, expected_contract: dict, mesh: Mesh) -> dict:
    """Return the saved state, after checking the contract and then every field.

    Rules:
    - rule:contract-first: the saved contract is compared with the expected one, exactly and entry by entry, before
      anything is accepted (errors.ContractMismatchError).
    - rule:validate-fields: a damaged checkpoint is refused with errors.CorruptCheckpointError: unreadable or cut
      files, missing fields, wrong dtypes or shapes, an order that is not a permutation, a cursor outside 0..rows.
    - rule:refuse-nan: weights and momentum must be finite: NaN momentum cannot continue the run and is refused.
    - rule:exact-resume: the state comes back exactly, weights and momentum replicated on the mesh given, so the run
      continues as the uninterrupted one, in this process or a fresh one.
    """
    path = os.fspath(path)

    def corrupt(why):
        return errors.CorruptCheckpointError(f"{path}: {why}; this file cannot continue the run")

    try:
        with np.load(path, allow_pickle=False) as archive:
            members = {name: archive[name] for name in archive.files}
    except Exception as exc:
        raise corrupt(f"not a readable NPZ ({type(exc).__name__}: {exc})") from None
    if "contract" not in members:
        raise corrupt("no contract member")
    try:
        saved = json.loads(str(members["contract"]))
    except Exception:
        raise corrupt("the contract is not JSON text") from None
    expected = json.loads(json.dumps(expected_contract, sort_keys=True))
    if saved != expected:
        if not isinstance(saved, dict):
            raise corrupt("the contract is not a JSON object")
        differ = sorted(k for k in set(saved) | set(expected) if saved.get(k) != expected.get(k))
        raise errors.ContractMismatchError(f"{path} belongs to another experiment: {differ} differ")
    n, d = expected["features_shape"]
    for name in ("weights", "momentum", "key", "order", "cursor", "step"):
        if name not in members:
            raise corrupt(f"field {name} is missing")
    for name in ("weights", "momentum"):
        value = members[name]
        if value.dtype != np.dtype(np.float32) or value.shape != (d,):
            raise corrupt(f"{name} is {value.dtype} {value.shape}, expected float32 ({d},)")
        if not np.all(np.isfinite(value)):
            raise corrupt(f"{name} holds NaN or infinity")
    key = members["key"]
    if key.dtype != np.dtype(np.uint32) or key.shape != (2,):
        raise corrupt(f"key is {key.dtype} {key.shape}, expected uint32 (2,)")
    order = members["order"]
    if order.dtype.kind not in "iu" or order.shape != (n,):
        raise corrupt(f"order is {order.dtype} {order.shape}, expected integer ids ({n},)")
    if not np.array_equal(np.sort(order), np.arange(n)):
        raise corrupt("order is not a permutation of the row ids")
    for name in ("cursor", "step"):
        value = members[name]
        if value.dtype.kind not in "iu" or value.shape != ():
            raise corrupt(f"{name} is {value.dtype} {value.shape}, expected one integer")
    cursor, step = int(members["cursor"]), int(members["step"])
    if not 0 <= cursor <= n:
        raise corrupt(f"cursor {cursor} is outside 0..{n}")
    if step < 0:
        raise corrupt(f"step {step} is negative")
    replicated = NamedSharding(mesh, P())
    return {
        "weights": jax.device_put(members["weights"], replicated),
        "momentum": jax.device_put(members["momentum"], replicated),
        "key": key,
        "order": order,
        "cursor": cursor,
        "step": step,
    }
