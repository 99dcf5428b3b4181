"""The mistakes a diagnosis can name, each by one id: a diagnosis marks the ones it names as `{cause:ID}`.

The runner moves the marks out of the text into the failure's `causes` (checker/command.py), so a test asserts
which mistake was diagnosed by its id, whatever words the diagnosis uses for it. An id is named only where the
evidence the check observed fits that mistake; a check's fixed words carry no mark.
"""

MARKER = "cause:"

CAUSES = {
    # stage 1: initial and next_batch
    "typed-key": "a typed PRNG key (jax.random.key) in the state, not the legacy uint32 (2,) key",
    "global-rng": "the order drawn from a global or unseeded generator, not from the key",
    "unsplit-key": "the first permutation drawn from the unsplit seed key",
    "drawn-with-kept-half": "the permutation drawn with the half of the split the state keeps",
    "order-by-row-count": "the order drawn another way above some row count",
    "sized-by-batch-size": "a buffer or range sized by batch_size, not by the ids taken",
    "batch-too-long": "a batch longer than batch_size",
    "remainder-topped-up": "the epoch's remainder topped up with ids of the next epoch",
    "remainder-dropped": "the epoch's remainder dropped",
    "batch-length": "a batch length other than the ids left in the epoch, at most batch_size",
    "ids-not-from-order": "ids other than order[cursor : cursor + batch_size]",
    "new-order-not-kept": "the new epoch's order drawn but not kept in the state",
    "key-reused": "one key reused for every epoch",
    "key-not-first-half": "a saved key other than the first half of the split",
    "order-not-the-recipes": "a new epoch's order other than permutation(subkey, n)",
    "cursor-by-batch-size": "the cursor moved by batch_size, not by the ids taken",
    "cursor-not-coverage": "a cursor other than the ids consumed this epoch",
    "no-lazy-epoch-end": "a state at an epoch's end in the lazy form (cursor == rows) not continued",
    "arrays-changed-in-place": "the caller's arrays changed in place",
    "dict-entries-replaced": "entries of the caller's dict replaced",
    "step-in-sampler": "next_batch increments step",
    "mask-from-values": "the mask decided by the row values, not by position",
    "padding-masked-in": "mask 1 on padded slots",
    "padding-not-finite": "padded slots filled with non-finite numbers (nan, inf)",
    "slots-all": "padded to a multiple of jax.device_count(), not of the mesh's size",
    "slots-batch": "padded to the batch size, not to the rows taken",
    "slots-extra": "a whole extra device's worth of padding",
    "slots-none": "no padding to the device count",
    "slots-power": "padded to a power of two",
    "host-array": "a host array where a placed jax.Array belongs",
    "initial-dtype": "initial's weights or momentum of a dtype other than float32",
    "other-devices": "placed on devices other than the mesh given holds",
    "other-device-order": "placed on the mesh's devices in another order",
    "other-spec": "placed with another PartitionSpec",
    "batch-on-the-states-mesh": "the batch placed on the mesh the state's arrays live on, not the mesh given",
    "result-changed-later": "a result whose values change when a later call runs (a view of a buffer filled again)",
    "state-field-added": "a state returned with a field beside the six",
    "result-handed-out-again": "a result kept between calls and handed out again",
    # stage 2: make_step and transition (the ranked formulas of checker/formulas.py among them)
    "local-means": "the mean of the per-device means",
    "local-means-reweighted": "each device's mean multiplied back by its count (or weighted by it) before the sum: "
    "x / c * c rounds",
    "local-means-zero-when-empty": "the mean of the per-device means, an empty device's taken as 0",
    "padding-counted": "padding counted as observations in the denominator",
    "unmasked-residuals": "the loss numerator includes the padded slots",
    "summed-twice": "a sum over the devices added over them again",
    "local-sum": "the sum of the per-device means",
    "local-count": "a division by one device's own count",
    "device-zero": "device 0's own mean, never added across devices",
    "local-losses-of-non-empty-devices": "the mean of the losses of the devices holding a valid row",
    "root-mean-square": "the square root of the loss (RMSE)",
    "after-update": "the loss after the update, not before it",
    "missing-factor-two": "the gradient without the 2 of d(r^2)/dw",
    "half-mse": "the 1/2-MSE loss",
    "factor-two": "a factor 2 too many",
    "residual-sign": "the residual's sign flipped",
    "constant-factor": "a constant factor in the formula",
    "reduced-precision": "arithmetic in bfloat16 or float16",
    "per-device-division": "a per-device division by an empty device's zero count",
    "non-finite-leak": "non-finite values where every device holds a valid row",
    "clipped": "a gradient clipped to a norm",
    "momentum-as-gradient": "the new momentum returned in the gradient's place",
    "gradient-only": "the gradient wrong, the update's recursion right on it",
    "gradient-and-update": "the gradient wrong and the update's recursion wrong on it",
    "update-diverges": "the gradient right, the update's recursion wrong",
    "course-learning-rate": "the course's learning rate, not the one make_step was given",
    "course-decay": "the course's decay, not the one make_step was given",
    "learning-rate-in-momentum": "the learning rate moved into the momentum",
    "averaged-momentum": "the averaging form of momentum",
    "old-momentum": "the weights updated with the momentum from before the step",
    "gradient-step": "a plain gradient step, momentum ignored",
    "decay-on-every-device": "the decayed momentum added on every device",
    "momentum-dropped": "the previous momentum dropped",
    "nesterov": "a Nesterov step",
    "ascent": "the update climbs the loss",
    "weights-kept": "the weights returned unchanged",
    "swapped": "learning rate and decay swapped",
    "hyperparameters-altered": "learning rate or decay altered (floored, clamped, rounded)",
    "hyperparameter-types-refused": "a learning rate or decay Config accepts refused for its type",
    "grows-with-devices": "a gradient that grows with the device count",
    "narrow-count": "the valid rows counted in a narrow type",
    "count-offset": "a division by the count plus an epsilon, not by the count",
    "loss-numerator-rounds": "a loss numerator that rounds where the sum of squared residuals is exact",
    "not-sharded": "a step with no all_reduce",
    "step-counts-examples": "step increased by the number of ids",
    "donated-buffer": "the caller's buffers donated",
    "loss-on-device": "the loss returned as a device array",
    "batch-fetched": "transition calls the step on host copies of the batch, not on its placed arrays",
    "outputs-copied": "transition keeps copies of the step's new weights and momentum, not the arrays it returned",
    "loss-altered": "transition reports a loss other than the step's (rounded, recomputed)",
    "loss-not-python-float": "the loss returned as a NumPy scalar or array, not a Python float",
    # stage 3: contract, save and restore
    "hyperparameter-float64-merged": "a contract that keeps a learning rate or decay coarser than its float64",
    "hyperparameter-rounded": "a contract that rounds a learning rate or decay (one float32 step merged)",
    "contract-ignores-data": "a contract alike for data that differ (bytes, shapes, order, size)",
    "contract-json-form": "a contract holding tuples or non-str keys, which JSON gives back as lists and str keys",
    "contract-varies": "a contract that differs for equal inputs (another process, folder, memory layout or container)",
    "contract-ignores-setting": "a contract alike for another seed, batch size or device count",
    "cleanup-misses-base-exceptions": "a save that cleans up on some exceptions only (KeyboardInterrupt, SystemExit)",
    "restore-touches-the-file": "restore changes the checkpoint it reads (bytes, modification time, permissions)",
    "save-changes-its-inputs": "save assigns into the state it is given (an entry normalised or replaced)",
    "removes-what-it-found": "a save that, undoing its work, removes a folder or file that was there before it or "
    "that another saver put there meanwhile",
    "wrote-beside": "save, given a path that exists, wrote another name beside it",
    "overwrites": "save overwrote an existing checkpoint",
    "refusal-not-the-courses": "a refusal with another exception than the course's",
    "leftovers": "save leaves files beside the checkpoint",
    "contract-compared-in-part": "a contract compared on some of its members only (the expected one's, or those "
    "both contracts have)",
    "left-open-on-error": "a descriptor left open on a way out of save or restore: a refusal or an error",
    "written-in-place": "an interrupted save leaves an incomplete file at the final path",
    "no-publication": "save writes the final name in place, no publication",
    "changes-working-directory": "save changes the process's working directory",
    "temporary-elsewhere": "save writes its temporary file outside the target's folder",
    "fsync-before-last-write": "the temporary file synced before its last write",
    "no-fsync-before-publish": "the file published with no fsync after its last write",
    "check-then-open": "an existence check, then the final name opened for writing",
    "check-then-replace": "an existence check (or a lock in memory), then a replace",
    "restore-resets-cursor": "restore gives back another cursor",
    "restore-changes-key": "restore gives back another key",
    "pickled-member": "a checkpoint member only a pickle reads",
    "field-missing": "a checkpoint lacking a field of the state",
    "field-saved-narrow": "a float field saved in a narrower float (float16, bfloat16) and given back rounded",
    "contract-not-compared": "restore accepts another experiment's checkpoint: no comparison of the contracts",
    "accepts-another-experiment": "restore accepts a file of another experiment or a damaged contract member",
    "accepts-non-finite": "restore accepts non-finite weights or momentum",
    "accepts-damaged-field": "restore accepts a field of the wrong shape, dtype or range",
    "contract-compared-loosely": "restore compares a contract entry within a tolerance or in part, not exactly",
}


def mark(cause_id: str | None) -> str:
    """The mark naming the mistake `cause_id` (empty for None)."""
    return f" {{{MARKER}{cause_id}}}" if cause_id else ""


def zeros_of(name: str, value, width: int) -> str:
    """What is wrong with `value`, initial's `name` field as a NumPy array (this module imports no NumPy), against
    float32 zeros of shape (width,), most telling first: the shape, then the dtype (marked), then the values."""
    if value.shape != (width,):
        return f"{name} start as float32 zeros, one per feature: shape {value.shape} for {width} feature(s)"
    if value.dtype != "float32":
        return (
            f"{name} have dtype {value.dtype} where float32 belongs: the course's weights and momentum are float32 "
            "from the first state on (a narrower float rounds every update away, a wider one is another program "
            "and another checkpoint) -> make them with np.zeros(d, np.float32)" + mark("initial-dtype")
        )
    return f"{name} start as float32 zeros, one per feature: {int((value != 0).sum())} non-zero"


def placement(wrong: str | None) -> str:
    """The mark of the placement mistake `common.sharding_of` describes in `wrong` (empty for None)."""
    if not wrong:
        return ""
    if "not a jax.Array" in wrong:
        return mark("host-array")
    if "but the mesh given holds devices" in wrong:
        return mark("other-devices")
    if "but the mesh given orders them" in wrong:
        return mark("other-device-order")
    return mark("other-spec")
