"""The rules the checker holds a learner's seven functions to: one table, stated in the starter, taught in a notebook.

Each rule has an id written `rule:ID`. The id appears in the starter template's docstring of the
function it constrains, beside the rule's words; the notebook that teaches it folds the same words without the id
(`learner/cells.py` renders that cell from this table); the checks that enforce it name it here.
tests/test_learner_loop.py keeps the three in agreement with the checker's registry: every check enforces
at least one rule, and every rule is stated in the starter and taught in its notebook.
"""

from dataclasses import dataclass

MARKER = "rule:"


@dataclass(frozen=True)
class Rule:
    id: str
    function: str
    text: str  # the rule in the course's words: what must hold, never how to write it
    checks: tuple  # names of the checks (shardlab.checker) that enforce it
    why: str = ""  # taught with the rule, in the notebook cell, where no other cell of the course teaches it


RULES = (
    # initial
    Rule(
        "initial-fields",
        "initial",
        "the state is the six fields: float32 zero weights and momentum of shape (d,), the legacy uint32 (2,) key, "
        "the first order (a permutation of 0..n-1), cursor 0 and step 0, in a new dict at every call",
        ("initial_state_fields",),
    ),
    Rule(
        "split-then-permute",
        "initial",
        "the first order comes from PRNGKey(seed) split once: the first half is kept in the state, the second draws "
        "the permutation, at every row count; the same seed replays the same ids, another seed others",
        ("first_order_follows_the_seed", "replay_is_deterministic"),
    ),
    Rule(
        "replicated",
        "initial",
        "weights and momentum live on every device of the mesh, replicated (NamedSharding(mesh, P()))",
        ("initial_state_fields", "replicas_agree", "restore_returns_every_field", "random_sampler_walk"),
    ),
    Rule(
        "plain-tuple-data",
        "initial",
        "data is any (features, targets) pair of float32 arrays: the course's Dataset or a plain tuple",
        ("random_sampler_walk", "random_transition_walk"),
        why=(
            "Why: the notebooks hand you the course's `Dataset`, but anything that unpacks as `features, targets "
            "= data` is the same data, and code that reads `data.features` breaks on a plain tuple."
        ),
    ),
    Rule(
        "any-mesh",
        "initial",
        "the mesh may hold 1, 2, 3 or 4 devices; nothing may assume four",
        ("random_sampler_walk", "random_step_update", "random_transition_walk", "gradient_independent_of_device_count"),
        why=(
            "Why: the notebooks use four devices, but the device count is an input: a padding rule or a division "
            "written for four silently breaks on 1, 2 or 3 devices."
        ),
    ),
    # next_batch
    Rule(
        "remainder",
        "next_batch",
        "a batch never crosses an epoch boundary: the last batch of an epoch is the remainder, whatever its size, "
        "one id included; every epoch holds every id exactly once",
        ("batch_lengths_keep_the_remainder", "every_epoch_covers_every_id_once", "random_sampler_walk"),
    ),
    Rule(
        "reshuffle",
        "next_batch",
        "a new epoch splits the saved key again and draws its order with the second half, a permutation of the "
        "rows of the data that call is given (never an order kept from an earlier run; a state is only ever given the "
        "data of its own run, whose row count its order holds), and the new order is "
        "kept in the state; key and order change only between epochs: when the new epoch's first batch is read, "
        "or already when the previous epoch's last batch is taken (either is right)",
        ("epochs_follow_the_course_order", "key_changes_at_each_new_epoch", "random_sampler_walk"),
    ),
    Rule(
        "cursor",
        "next_batch",
        "the cursor is the position of the next unread id in the order: it moves by the number of ids taken; after "
        "an epoch's last batch it is rows, or 0 when the next epoch's order is already drawn (the reshuffle rule)",
        ("sampler_fields_follow_the_arithmetic",),
    ),
    Rule(
        "pad-by-position",
        "next_batch",
        "rows are padded to the smallest multiple of the device count that holds them; the mask is 1 on the "
        "selected rows and 0 on padded slots, decided by position, never by values; padded slots hold finite "
        "numbers (zeros, say: a step may multiply them by their mask 0, and 0 x nan is nan); the selected rows are "
        "data[ids] exactly, read at every call (arrays changed in place since an earlier call included)",
        ("padding_is_never_an_observation", "padding_is_decided_by_position", "random_sampler_walk"),
    ),
    Rule(
        "placed-batch",
        "next_batch",
        "features are placed with P('data', None), targets and mask with P('data'), on the mesh given",
        ("batch_is_placed_on_the_mesh", "random_sampler_walk"),
    ),
    Rule(
        "new-state",
        "next_batch",
        "a new state dict of the six fields (no other) is returned; the caller's dict and its arrays are never "
        "changed, and step is left alone",
        ("next_batch_returns_a_new_state", "next_batch_leaves_step_alone"),
    ),
    # make_step
    Rule(
        "global-mean",
        "make_step",
        "loss and gradient are the global masked means: summed over devices, divided once by the global valid "
        "count, held exactly at any batch size and at any scale of the data (no value dropped as too small), so "
        "padding (mask 0, whatever its target holds; its features are finite, as next_batch pads them) and empty "
        "devices add exact zeros and the device count changes nothing; equal to the exact means "
        "within float32 rounding of the order you choose, and exactly where nothing rounds (integer data, a count "
        "that is a power of two)",
        (
            "gradient_on_a_full_batch",
            "gradient_on_tail_batches",
            "loss_on_full_and_tail_batches",
            "empty_device_contributes_zeros",
            "gradient_independent_of_device_count",
            "count_is_exact_on_a_large_batch",
            "random_step_update",
        ),
    ),
    Rule(
        "loss-before-update",
        "make_step",
        "the loss reported is the loss at the weights the gradient was taken at, before the update",
        ("loss_is_taken_before_the_update",),
    ),
    Rule(
        "momentum",
        "make_step",
        "`v <- decay*v + g`, then `w <- w - learning_rate*v`, on the global gradient, with the mesh, learning rate "
        "and decay that call of make_step was given, as given (any value Config accepts, an int or a NumPy scalar "
        "included: no type test, floor or clamp); every "
        "replica ends with the same weights",
        ("consecutive_updates", "replicas_agree", "random_step_update", "step_follows_the_mesh_it_was_made_for"),
    ),
    Rule(
        "sharded-step",
        "make_step",
        "the compiled step is a jax.jit around a shard_map whose lowered program holds a real collective, on every "
        "mesh (one device included)",
        ("step_is_sharded", "compiled_step_lowers_and_compiles"),
    ),
    Rule(
        "eager-step",
        "make_step",
        "`compiled=False` returns the same mapped body without jit, with the same numbers",
        ("eager_step_matches_numpy", "eager_and_compiled_agree", "eager_step_is_the_unjitted_mapped_body"),
    ),
    # transition
    Rule(
        "one-update",
        "transition",
        "one transition is one next_batch and one call of the step it is given (never one it builds), on the "
        "batch's arrays (not under a jax.jit, vmap or grad of its own), step + 1; "
        "the new state holds the step's new weights and momentum as it returns them, replicated on the mesh, and "
        "the loss reported is the step's, unrounded",
        ("transition_is_one_batch_and_one_update", "random_transition_walk", "step_follows_the_mesh_it_was_made_for"),
    ),
    Rule(
        "input-intact",
        "transition",
        "the caller's state stays readable and unchanged: no donated or reused buffers",
        ("transition_leaves_its_input_intact",),
    ),
    Rule(
        "host-results",
        "transition",
        "the loss comes back as a host float and the ids, transition's and the batch's, as a host NumPy integer array "
        "(it may be a view of the state's order: a caller copies it before changing it)",
        ("results_are_host_values",),
        "Why: the notebooks print, compare and record them as JSON, and a device array there fails or drags a "
        "device buffer along.",
    ),
    # contract
    Rule(
        "contract-pins",
        "contract",
        "the contract changes with the seed, batch size, learning rate, decay, device count, shapes and every byte "
        "of the data, read again at every call (arrays changed in place since an earlier call included); the data "
        "are float32, as the course gives them (what another dtype would do is not asked)",
        ("contract_pins_the_experiment", "random_contract_tells_apart"),
    ),
    Rule(
        "contract-exact",
        "contract",
        "every entry is exact: a learning rate or decay one float64 step apart (the next Python float) is another "
        "experiment",
        ("random_contract_tells_apart",),
        why=(
            "Why: a learning rate rounded to six digits, or stored as a rounded decimal, makes two runs whose "
            "updates differ look like one experiment."
        ),
    ),
    Rule(
        "contract-json",
        "contract",
        "the contract is plain JSON data, equal for equal inputs in any process (no process id, time or path), "
        "a new dict at every call",
        ("contract_is_json_data", "contracts_agree_in_a_fresh_process", "random_contract_tells_apart"),
    ),
    # save
    Rule(
        "plain-npz",
        "save",
        "all six fields and the contract go into one NPZ that np.load(path, allow_pickle=False) reads",
        ("checkpoint_holds_every_field", "random_restore_damage"),
    ),
    Rule(
        "exact-path",
        "save",
        "the checkpoint is written at exactly the path given (any name, spaces at its ends, non-ASCII letters and "
        "$, % or ~ included, that leaves room under the file system's longest name for a temporary's suffix: no .npz "
        "added, nothing stripped, expanded or normalised) and that path is returned, "
        "as given or in its absolute form; save never changes the process's working directory and works called "
        "from any thread (a background checkpointer's: no signal handlers, which only the main thread may set)",
        ("random_restore_damage", "save_syncs_before_publishing", "restore_returns_every_field"),
        why=(
            "Why: a writer that adds a suffix of its own leaves the caller's `restore(path)` finding nothing, or "
            "an older file under that name."
        ),
    ),
    Rule(
        "never-overwrite",
        "save",
        "a path that exists, whatever it is (a checkpoint, an empty file, a folder, empty or not, a symbolic link, "
        "or a symbolic link that leads nowhere), is refused with errors.CheckpointExistsError and what is there is "
        "left untouched",
        ("save_never_overwrites", "refusals_name_the_course_errors", "invalid_arguments_are_refused"),
        why=(
            "Why: a name already taken is someone's data or someone's folder; a save that clears it, writes into it "
            "or follows a link loses what was there."
        ),
    ),
    Rule(
        "new-temp-name",
        "save",
        "bytes go first to a temporary file in the same folder, with a new name for every save, in every process "
        "(not from the global random module, which repeats in processes seeded alike), so a save killed midway "
        "never blocks the next one; nothing but the checkpoint is left behind (nor any file or folder left open), "
        "and a save that raises, whatever it raises (KeyboardInterrupt included), leaves its folder as it was (a "
        "folder it made included)",
        (
            "interrupted_save_leaves_nothing_or_a_checkpoint",
            "save_leaves_only_the_final_file",
            "save_errors_leave_the_folder_as_it_was",
            "save_syncs_before_publishing",
        ),
        why=(
            "Why: a save killed between writing and publishing leaves its temporary file behind; if every save "
            "used the same temporary name, that leftover would block all later saves."
        ),
    ),
    Rule(
        "fsync-before-publish",
        "save",
        "the temporary file is flushed and fsynced (os.fsync, or os.fdatasync, which also writes the size a reader "
        "needs) after its last write and only then published, so a published name never points at bytes still in "
        "memory",
        ("save_syncs_before_publishing",),
    ),
    Rule(
        "exclusive-publish",
        "save",
        "the finished file is published with an operation that fails if the name exists: of two savers in two "
        "processes racing for one name exactly one wins, and two saving different names into a folder neither "
        "found both do, where save makes missing folders (it need not: a save may raise for a folder that is not "
        "there); where that operation is refused (no hard links), the save raises rather than overwrite",
        ("racing_saves_never_overwrite", "interrupted_save_leaves_nothing_or_a_checkpoint"),
        why=(
            "Why: checking that the name is free and then publishing leaves a gap in which another process can "
            "publish, and a lock in one process's memory does not stop another process."
        ),
    ),
    Rule(
        "save-inputs-intact",
        "save",
        "save changes nothing it is given: not the state, its arrays or their placement",
        ("random_restore_damage",),
    ),
    # restore
    Rule(
        "contract-first",
        "restore",
        "the saved contract is compared with the expected one, exactly and entry by entry, before anything is "
        "accepted (errors.ContractMismatchError)",
        ("restore_refuses_another_experiment", "random_restore_damage"),
    ),
    Rule(
        "restore-inputs-intact",
        "restore",
        "restore changes nothing it is given: the expected contract is left as the caller passed it, whether the "
        "file is accepted or refused, and it changes nothing on disk (no file written, renamed or removed: another "
        "thread's save may be writing its temporary in that folder)",
        ("restore_returns_every_field", "random_restore_damage"),
    ),
    Rule(
        "validate-fields",
        "restore",
        "a checkpoint that is damaged or not there is refused with errors.CorruptCheckpointError: a path that "
        "does not exist (even with a checkpoint beside it under that path with .npz added or removed, its trailing "
        "separator stripped or a backslash read as '/', or under a name the path matches as a pattern: '*', '?', "
        "'[' and a backslash are letters of a name), a folder, "
        "a symbolic link that leads nowhere, an empty, unreadable or cut file, missing "
        "fields, wrong dtypes or shapes (weights and momentum float32 (d,), key uint32 (2,), order integer ids (n,), "
        "cursor and step 0-d integers), an order that is not a permutation, a cursor outside 0..rows",
        (
            "restore_refuses_damaged_checkpoints",
            "refusals_name_the_course_errors",
            "random_restore_damage",
            "invalid_arguments_are_refused",
        ),
        why=(
            "Why: the caller resumes from the name it was given; whether nothing, a folder or a broken file is "
            "there, no run can continue from it, and an OSError or a NumPy error leaves the caller guessing "
            "which; one course error says it."
        ),
    ),
    Rule(
        "refuse-nan",
        "restore",
        "weights and momentum must be finite: NaN momentum cannot continue the run and is refused",
        ("random_restore_damage",),
        why=(
            "Why: a NaN in momentum has the right dtype and shape, so field checks that look only at those accept"
            " it, and the first update turns every weight into NaN; finite values are part of a valid state."
        ),
    ),
    Rule(
        "exact-resume",
        "restore",
        "the state comes back exactly, every field in the dtype the state holds (the legacy uint32 key included, "
        "the order in the integer dtype your own states hold, whatever width the file stores it in, and a cursor "
        "or step held as a Python int as a Python int) and "
        "the step at any count a run reaches (a run of a few hundred epochs on 65,537 rows in batches of 1 passes "
        "2**24; a signed 32-bit integer holds every count a course run reaches), weights and momentum replicated on "
        "the mesh given, so the run continues as the uninterrupted one, in this process or a fresh one, from any of "
        "its threads (no signal handlers or alarms, which only the main thread may set), whatever key order the "
        "expected contract's entries have and from a read-only file, with nothing left open when it returns; "
        "restore must accept every file its own save writes of a finite state, for data of any row count or width, "
        "whatever the file's size (the member names, integer widths and any checksum are that save's choice, so a "
        "file written another way may be refused)",
        (
            "restore_returns_every_field",
            "resume_continues_the_same_run",
            "fresh_process_resume",
            "faults_show_where_arithmetic_predicts",
            "random_restore_damage",
        ),
    ),
)

FUNCTIONS = ("initial", "next_batch", "make_step", "transition", "contract", "save", "restore")
# The notebook that teaches each function's rules (where its cell of folded rules and hints lives).
BY_ID = {rule.id: rule for rule in RULES}  # the checker reads a rule's text (its error type) and marks by id
TAUGHT_IN = {
    "initial": "stage1_batches",
    "next_batch": "stage1_batches",
    "make_step": "stage2_update",
    "transition": "stage2_update",
    "contract": "stage3a_checkpoint",
    "save": "stage3a_checkpoint",
    "restore": "stage3a_checkpoint",
}


# What a function's notebook shows the course's own code doing that no check asks of the learner's:
# said beside the rules, so a lesson's demonstration is not read as a rule.
NOT_ASKED = {
    "initial": (
        "Not asked of yours: refusing bad input. The course's own initial refuses data whose rows disagree or hold "
        "a NaN; yours is only ever given valid data."
    ),
    "next_batch": (
        "Not asked of yours: refusing a batch size of 0 or below. The course's own next_batch refuses it; yours is "
        "only ever given batch sizes from 1 up."
    ),
}


def of(function: str) -> list[Rule]:
    return [rule for rule in RULES if rule.function == function]


def for_check(name: str) -> list[Rule]:
    """The rules a check enforces (by check name)."""
    return [rule for rule in RULES if name in rule.checks]
