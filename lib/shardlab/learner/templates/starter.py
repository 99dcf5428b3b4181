"""My shardlab implementation: replace each `raise` with code, one stage at a time.

Each function's docstring says what it must return and the rules it must keep: each rule has an id
(`rule:...`) that a failing check prints; the notebook that teaches the function teaches the rule, and
lists it, folded and labelled with the same id, beside the function's hints. The docstrings do not say
how; when you are stuck, open the hints in layers, a nudge first and the full recipe last, folded in the
notebook or from a terminal:

    python -m shardlab hint next_batch        # level 1; add 2, 3, ... for more

After each stage, check it (stages are cumulative: stage 2 re-checks stage 1; ONLY=1 checks just one):

    python -m shardlab check --implementation THIS_FILE --stage 1      (or: make check IMPL=THIS_FILE STAGE=1)

and run the notebooks against it with `make run IMPL=THIS_FILE`. Keep the signatures: the notebooks and
the checker call these seven functions by name.

Stage 4 asks for no new function: its checks judge your make_step again (lowered and compiled, and eager
against compiled). What it asks of you is in the stage 4a notebook: your hypothesis (the `mine = None` cell)
and the written answers it asks for.

Rules for every function: the checker tries your code on many configurations (1 to 64 rows, 1 to 9
features, any batch size up to rows + 2, meshes of 1 to 4 devices, any seed, other learning rates and
decays, jitted and un-jitted steps, data as the course's Dataset or a plain (features, targets) tuple),
not only the course's 23 rows in batches of 7. No function changes what it is given: not the state dict,
not its arrays (their values, type or placement on the devices), not the data or the contract. Each call
must return within 20 s and use less than 2 GB; what your code prints goes to a log, and more than 5 MB
of it stops the run.
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
      uint32 (2,) key, the first order (a permutation of 0..n-1), cursor 0 and step 0, in a new dict at every call.
    - rule:split-then-permute: the first order comes from PRNGKey(seed) split once: the first half is kept in the state,
      the second draws the permutation, at every row count; the same seed replays the same ids, another seed others.
    - rule:replicated: weights and momentum live on every device of the mesh, replicated (NamedSharding(mesh, P())).
    - rule:plain-tuple-data: data is any (features, targets) pair of float32 arrays: the course's Dataset or a plain
      tuple.
    - rule:any-mesh: the mesh may hold 1, 2, 3 or 4 devices; nothing may assume four.
    Not asked of yours: refusing bad input. The course's own initial refuses data whose rows disagree or hold a NaN;
    yours is only ever given valid data.
    """
    raise _todo("initial", 1, "the state at step 0")


def next_batch(state: dict, data, batch_size: int, mesh: Mesh) -> tuple[dict, Batch]:
    """Return (new state, Batch(features, targets, mask, ids)): the next ids of the epoch, padded and placed.

    Rules:
    - rule:remainder: a batch never crosses an epoch boundary: the last batch of an epoch is the remainder, whatever its
      size, one id included; every epoch holds every id exactly once.
    - rule:reshuffle: a new epoch splits the saved key again and draws its order with the second half, a permutation of
      the rows of the data that call is given (never an order kept from an earlier run; a state is only ever given the
      data of its own run, whose row count its order holds), and the new order is kept in the state; key and order
      change only between epochs: when the new epoch's first batch is read, or already when the previous epoch's last
      batch is taken (either is right).
    - rule:cursor: the cursor is the position of the next unread id in the order: it moves by the number of ids taken;
      after an epoch's last batch it is rows, or 0 when the next epoch's order is already drawn (the reshuffle rule).
    - rule:pad-by-position: rows are padded to the smallest multiple of the device count that holds them; the mask is 1
      on the selected rows and 0 on padded slots, decided by position, never by values; padded slots hold finite numbers
      (zeros, say: a step may multiply them by their mask 0, and 0 x nan is nan); the selected rows are data[ids]
      exactly, read at every call (arrays changed in place since an earlier call included).
    - rule:placed-batch: features are placed with P('data', None), targets and mask with P('data'), on the mesh given.
    - rule:new-state: a new state dict of the six fields (no other) is returned; the caller's dict and its arrays are
      never changed, and step is left alone.
    Not asked of yours: refusing a batch size of 0 or below. The course's own next_batch refuses it; yours is only ever
    given batch sizes from 1 up.
    """
    raise _todo("next_batch", 1, "the next ids, padded and placed")


# ---------------------------------------------------------------- stage 2: the global update


def make_step(mesh: Mesh, learning_rate: float = LEARNING_RATE, decay: float = DECAY, compiled: bool = True):
    """Return step(features, targets, mask, weights, momentum) -> (new weights, new momentum, loss, gradient).

    Rules:
    - rule:global-mean: loss and gradient are the global masked means: summed over devices, divided once by the global
      valid count, held exactly at any batch size and at any scale of the data (no value dropped as too small), so
      padding (mask 0, whatever its target holds; its features are finite, as next_batch pads them) and empty devices
      add exact zeros and the device count changes nothing; equal to the exact means within float32 rounding of the
      order you choose, and exactly where nothing rounds (integer data, a count that is a power of two).
    - rule:loss-before-update: the loss reported is the loss at the weights the gradient was taken at, before the
      update.
    - rule:momentum: `v <- decay*v + g`, then `w <- w - learning_rate*v`, on the global gradient, with the mesh,
      learning rate and decay that call of make_step was given, as given (any value Config accepts, an int or a NumPy
      scalar included: no type test, floor or clamp); every replica ends with the same weights.
    - rule:sharded-step: the compiled step is a jax.jit around a shard_map whose lowered program holds a real
      collective, on every mesh (one device included).
    - rule:eager-step: `compiled=False` returns the same mapped body without jit, with the same numbers.
    """
    raise _todo("make_step", 2, "the global update")


def transition(state: dict, data, batch_size: int, step, mesh: Mesh) -> tuple[dict, float, np.ndarray]:
    """Return (new state, the loss before the update, the ids of the batch): one batch, one update.

    Rules:
    - rule:one-update: one transition is one next_batch and one call of the step it is given (never one it builds), on
      the batch's arrays (not under a jax.jit, vmap or grad of its own), step + 1; the new state holds the step's new
      weights and momentum as it returns them, replicated on the mesh, and the loss reported is the step's, unrounded.
    - rule:input-intact: the caller's state stays readable and unchanged: no donated or reused buffers.
    - rule:host-results: the loss comes back as a host float and the ids, transition's and the batch's, as a host NumPy
      integer array (it may be a view of the state's order: a caller copies it before changing it).
    """
    raise _todo("transition", 2, "one batch, one update")


# ---------------------------------------------------------------- stage 3: a fresh process continues


def contract(data, config: Config) -> dict:
    """Return everything that must match for a checkpoint to continue *this* experiment, as plain data.

    Rules:
    - rule:contract-pins: the contract changes with the seed, batch size, learning rate, decay, device count, shapes and
      every byte of the data, read again at every call (arrays changed in place since an earlier call included); the
      data are float32, as the course gives them (what another dtype would do is not asked).
    - rule:contract-exact: every entry is exact: a learning rate or decay one float64 step apart (the next Python float)
      is another experiment.
    - rule:contract-json: the contract is plain JSON data, equal for equal inputs in any process (no process id, time or
      path), a new dict at every call.
    """
    raise _todo("contract", 3, "what must match to continue")


def save(path, state: dict, contract_: dict) -> str:
    """Write the six fields and the contract to a new checkpoint at `path`; return `path`.

    Rules:
    - rule:plain-npz: all six fields and the contract go into one NPZ that np.load(path, allow_pickle=False) reads.
    - rule:exact-path: the checkpoint is written at exactly the path given (any name, spaces at its ends, non-ASCII
      letters and $, % or ~ included, that leaves room under the file system's longest name for a temporary's suffix: no
      .npz added, nothing stripped, expanded or normalised) and that path is returned, as given or in its absolute form;
      save never changes the process's working directory and works called from any thread (a background checkpointer's:
      no signal handlers, which only the main thread may set).
    - rule:never-overwrite: a path that exists, whatever it is (a checkpoint, an empty file, a folder, empty or not, a
      symbolic link, or a symbolic link that leads nowhere), is refused with errors.CheckpointExistsError and what is
      there is left untouched.
    - rule:new-temp-name: bytes go first to a temporary file in the same folder, with a new name for every save, in
      every process (not from the global random module, which repeats in processes seeded alike), so a save killed
      midway never blocks the next one; nothing but the checkpoint is left behind (nor any file or folder left open),
      and a save that raises, whatever it raises (KeyboardInterrupt included), leaves its folder as it was (a folder it
      made included).
    - rule:fsync-before-publish: the temporary file is flushed and fsynced (os.fsync, or os.fdatasync, which also writes
      the size a reader needs) after its last write and only then published, so a published name never points at bytes
      still in memory.
    - rule:exclusive-publish: the finished file is published with an operation that fails if the name exists: of two
      savers in two processes racing for one name exactly one wins, and two saving different names into a folder neither
      found both do, where save makes missing folders (it need not: a save may raise for a folder that is not there);
      where that operation is refused (no hard links), the save raises rather than overwrite.
    - rule:save-inputs-intact: save changes nothing it is given: not the state, its arrays or their placement.
    """
    raise _todo("save", 3, "a new checkpoint at path")


def restore(path, expected_contract: dict, mesh: Mesh) -> dict:
    """Return the saved state, after checking the contract and then every field.

    Rules:
    - rule:contract-first: the saved contract is compared with the expected one, exactly and entry by entry, before
      anything is accepted (errors.ContractMismatchError).
    - rule:restore-inputs-intact: restore changes nothing it is given: the expected contract is left as the caller
      passed it, whether the file is accepted or refused, and it changes nothing on disk (no file written, renamed or
      removed: another thread's save may be writing its temporary in that folder).
    - rule:validate-fields: a checkpoint that is damaged or not there is refused with errors.CorruptCheckpointError: a
      path that does not exist (even with a checkpoint beside it under that path with .npz added or removed, its
      trailing separator stripped or a backslash read as '/', or under a name the path matches as a pattern: '*', '?',
      '[' and a backslash are letters of a name), a folder, a symbolic link that leads nowhere, an empty, unreadable or
      cut file, missing fields, wrong dtypes or shapes (weights and momentum float32 (d,), key uint32 (2,), order
      integer ids (n,), cursor and step 0-d integers), an order that is not a permutation, a cursor outside 0..rows.
    - rule:refuse-nan: weights and momentum must be finite: NaN momentum cannot continue the run and is refused.
    - rule:exact-resume: the state comes back exactly, every field in the dtype the state holds (the legacy uint32 key
      included, the order in the integer dtype your own states hold, whatever width the file stores it in, and a cursor
      or step held as a Python int as a Python int) and the step at any count a run reaches (a run of a few hundred
      epochs on 65,537 rows in batches of 1 passes 2**24; a signed 32-bit integer holds every count a course run
      reaches), weights and momentum replicated on the mesh given, so the run continues as the uninterrupted one, in
      this process or a fresh one, from any of its threads (no signal handlers or alarms, which only the main thread may
      set), whatever key order the expected contract's entries have and from a read-only file, with nothing left open
      when it returns; restore must accept every file its own save writes of a finite state, for data of any row count
      or width, whatever the file's size (the member names, integer widths and any checksum are that save's choice, so a
      file written another way may be refused).
    """
    raise _todo("restore", 3, "the saved state, checked")
