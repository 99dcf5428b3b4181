"""My shardlab implementation: replace each `raise` with code, one stage at a time.

After each stage, check it (stages are cumulative, so stage 2 re-checks stage 1):

    python -m shardlab check --implementation THIS_FILE --stage 1

and run the notebooks against it with `make run IMPL=THIS_FILE`. Keep the signatures:
the notebooks and the checker call these seven functions by name.

The checker tries your code on many configurations (1 to 64 rows, 1 to 9 features, any batch size
up to rows + 2, meshes of 1 to 4 devices, any seed, other learning rates and decays, jitted and
un-jitted steps, data as the course's Dataset or a plain (features, targets) tuple), not only the
course's 23 rows in batches of 7. No function changes what it is given: not the state dict, not its
arrays (their values, type or placement on the devices), not the data or the contract. Each call must
return within 20 s and use less than 2 GB; what your code prints goes to a log, and more than 5 MB of
it stops the run.
"""

import jax  # noqa: F401  (these imports are the ones you will need)
import jax.numpy as jnp  # noqa: F401
import numpy as np
from jax.sharding import Mesh, NamedSharding  # noqa: F401
from jax.sharding import PartitionSpec as P  # noqa: F401

from shardlab import errors  # noqa: F401  (CheckpointExistsError, ContractMismatchError, EmptyBatchError, ...
from shardlab.core.batch import Batch  # noqa: F401  (the container next_batch returns: features, targets, mask, ids)
from shardlab.core.config import DECAY, LEARNING_RATE, Config

AXIS = "data"  # the mesh axis name


def _todo(function: str, stage: int, hint: str) -> NotImplementedError:
    """The error every placeholder raises: which function, which stage, a one-line hint."""
    return NotImplementedError(f"{function}: not implemented yet (stage {stage}); {hint} (hints: {__file__})")


# ---------------------------------------------------------------- stage 1: the next batch is explicit


def initial(seed: int, data, mesh: Mesh) -> dict:
    """State at step 0: zero weights and momentum, a split key and the first order."""
    # Hints:
    # - data is (features, targets): float32 arrays of shapes (n, d) and (n,); any such pair (the course's
    #   Dataset or a plain tuple), so unpack it: features, targets = data.
    # - key = jax.random.PRNGKey(seed); key, subkey = jax.random.split(key); keep `key` in the state and
    #   draw order = jax.random.permutation(subkey, n) with the second half (never the unsplit seed key).
    # - weights and momentum: float32 zeros of shape (d,), replicated with NamedSharding(mesh, P()).
    # - return {"weights", "momentum", "key", "order", "cursor": 0, "step": 0}; key as uint32 (2,).
    raise _todo("initial", 1, "split PRNGKey(seed), keep the first half, permute with the second")


def next_batch(state: dict, data, batch_size: int, mesh: Mesh) -> tuple[dict, Batch]:
    """Return (new state, placed batch): advance the sampler, pad, place. Step is unchanged."""
    # Hints:
    # - If cursor has reached the end of order, split the saved key again, draw a new permutation, cursor 0.
    # - Take ids = order[cursor : cursor + batch_size]; never cross the epoch boundary, keep the remainder
    #   whatever its size, one id included (23 rows in 7s give 7, 7, 7, 2; in 11s give 11, 11, 1).
    # - Pad rows to the smallest multiple of mesh.size that holds them (8 rows on 4 devices: 8 slots, no
    #   padding); mask is 1 for real rows and 0 for padding. mesh.size may be 1, 2, 3 or 4.
    # - Place features with P(AXIS, None), targets and mask with P(AXIS) (jax.device_put + NamedSharding).
    # - Return a new dict ({**state, ...}); never assign into `state`; leave "step" alone.
    raise _todo("next_batch", 1, "take the next ids, pad to a device multiple, place; new state")


# ---------------------------------------------------------------- stage 2: the global update


def make_step(mesh: Mesh, learning_rate: float = LEARNING_RATE, decay: float = DECAY, compiled: bool = True):
    """Return step(features, targets, mask, weights, momentum) -> (weights, momentum, loss, grad)."""
    # Hints:
    # - Inside jax.shard_map over AXIS, each device computes its valid count N_d, gradient numerator
    #   2 * sum m_i x_i r_i and loss numerator sum m_i r_i^2 (r_i = x_i.w - y_i, padding selected out).
    # - jax.lax.psum each of the three over AXIS, then divide once by the global N: never average local means.
    # - Loss before the update; then v <- decay * v + grad, w <- w - learning_rate * v (global gradient only).
    # - in_specs (P(AXIS, None), P(AXIS), P(AXIS), P(), P()); out_specs P() for all four outputs.
    # - Use the learning_rate and decay you are given (the checker builds steps with other values).
    # - compiled=True returns jax.jit(mapped); compiled=False returns the mapped function itself (stage 4),
    #   built with the same learning_rate and decay (the checker tries both kinds with other values).
    raise _todo("make_step", 2, "shard_map: psum count and numerators, divide once, momentum")


def transition(state: dict, data, batch_size: int, step, mesh: Mesh) -> tuple[dict, float, np.ndarray]:
    """Return (new state, pre-update loss, ids): one batch, one optimiser update, step + 1."""
    # Hints: next_batch, then step(batch.features, batch.targets, batch.mask, weights, momentum) with the
    # `step` you are given (never build your own: it may carry another learning rate and decay);
    # the new state keeps the sampler fields from next_batch and increments step exactly once.
    raise _todo("transition", 2, "next_batch, then one step; step + 1")


# ---------------------------------------------------------------- stage 3: a fresh process continues


def contract(data, config: Config) -> dict:
    """Everything that must match for a checkpoint to continue *this* experiment."""
    # Hints: plain JSON data: a schema version, dataset shapes and dtypes, a hash of every byte of the
    # features and targets (hashlib.sha256), seed, batch size, feature width, learning rate, decay and
    # device count, each exactly (no rounding: a change of one float32 ulp is another experiment). The same
    # inputs give an equal contract in any process (no process id, time or path in it).
    raise _todo("contract", 3, "everything that must match to continue this experiment")


def save(path, state: dict, contract_: dict) -> str:
    """Write all six fields plus the contract to a new NPZ at exactly `path` (any name); return the path."""
    # Hints: refuse a path that exists (raise errors.CheckpointExistsError); write np.savez to a temporary
    # file in the same folder as `path` (a bare file name means the working directory; a rename cannot
    # cross file systems), flush and fsync it, then publish it with an operation that fails if the name
    # already exists (os.link(tmp, path), then remove tmp): os.replace, or a check followed by a rename,
    # would replace a checkpoint another saver published in between, and a lock kept in your process's memory
    # does not stop a saver in another process: of two saves racing for one name exactly one succeeds, the
    # other raises errors.CheckpointExistsError. A reader never sees a half-written file. A save killed
    # midway must not stop the next save to that name: a temporary name of its own each time
    # (tempfile.mkstemp(dir=folder)), never a fixed temporary name or lock file that a killed save leaves
    # behind. Everything must load with np.load(path, allow_pickle=False): store the contract as a JSON
    # string. Name the NPZ members as you like (the checker reads a checkpoint only through your restore).
    # Fetch arrays into your own variables: never assign into `state`.
    raise _todo("save", 3, "six fields + contract into a new NPZ; never overwrite")


def restore(path, expected_contract: dict, mesh: Mesh) -> dict:
    """Return the saved state after checking contract, then fields; weights re-replicated on `mesh`."""
    # Hints: an unreadable, truncated or non-NPZ file is refused (errors.CorruptCheckpointError); compare the
    # saved contract with expected_contract *before* accepting anything, exactly and every entry (==, no
    # tolerance: one ulp of the learning rate is another experiment; errors.ContractMismatchError); then check
    # (errors.CorruptCheckpointError): every field present; weights and momentum float32 of the width and
    # finite (NaN momentum cannot continue the run either); key uint32 (2,); order integer ids, a
    # permutation of 0..rows-1; cursor and step one integer each, 0 <= cursor <= rows (both ends are valid:
    # a checkpoint at an epoch's end has cursor = rows, or 0 if you reshuffle at once), step >= 0.
    # Replicate weights and momentum with NamedSharding(mesh, P()).
    raise _todo("restore", 3, "check the contract first, then every field; replicate weights")
