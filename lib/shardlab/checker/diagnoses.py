"""What an exception raised by the learner's code says about the mistake behind it, in the course's words.

A check that meets an exception it did not plan for reports where it was raised; this module adds what the
exception's type and message show, every cause that fits them, most likely first, each with the rule it breaks.
It reads only the exception (its class name, its message and the `file:line in function` it was raised at):
the same text a learner sees, never the learner's code.
"""

from shardlab.checker.formulas import mark

# (does it fit: (type name, message, where) -> bool, the cause in words, its rules), most likely first
KNOWN = (
    (
        lambda kind, text, where: "has been deleted" in text or "donated" in text.lower(),
        "an array the caller still holds was deleted: the step donated its buffers (jax.jit(..., donate_argnums=...)) "
        "or the code deleted them -> never donate or delete the caller's weights and momentum; the caller's state "
        "stays usable after every call",
        ("input-intact",),
    ),
    (
        lambda kind, text, where: "incompatible devices" in text or "different devices" in text,
        "arrays on different devices met in one computation: a function placed its arrays on a mesh of its own "
        "making (jax.devices()[:k], the devices sorted) instead of the mesh it was given -> place every array on "
        "the mesh the function is given",
        ("replicated", "placed-batch", "any-mesh"),
    ),
    (
        lambda kind, text, where: kind == "IndivisibleError" or "divisible" in text or "evenly" in text,
        "an array's rows do not split evenly over the mesh's devices: the batch was padded to a multiple of another "
        "device count than the mesh's (jax.device_count(), a fixed 4) -> pad to the next multiple of mesh.size",
        ("pad-by-position", "any-mesh"),
    ),
    (
        lambda kind, text, where: kind == "ContractMismatchError" and " in restore" in where,
        "restore refused a checkpoint of the same experiment as another experiment's: the contract the run "
        "computed again differs from the one saved, so it holds a value that changes from call to call or from "
        "process to process (hash() of a str or bytes is salted per process, id(), a time, a path) -> build the "
        "contract from the data's bytes and the configuration only",
        ("contract-json", "contract-pins"),
    ),
    (
        lambda kind, text, where: kind == "ContractMismatchError" and " in restore" in where,
        "restore's comparison refuses two equal contracts: the saved one comes back from its JSON text in another "
        "form (lists for tuples, str keys for int keys) -> compare the contract read back with "
        "the expected one in the same plain-JSON form (json.loads(json.dumps(expected)))",
        ("contract-first",),
    ),
    (
        lambda kind, text, where: kind == "CorruptCheckpointError" and " in restore" in where,
        "restore refused a checkpoint its own save wrote: every valid checkpoint (step 0, an epoch's end, any path) "
        "must be accepted -> compare the checks restore makes with what save writes",
        ("exact-resume", "validate-fields"),
    ),
    (
        lambda kind, text, where: "allow_pickle" in text or "Object arrays" in text,
        "a member of the checkpoint is a pickled Python object: np.load(allow_pickle=False) cannot read it -> save "
        "only arrays of numbers and the contract as JSON text",
        ("plain-npz",),
    ),
)


def explain(exc: BaseException, where: str = "") -> str:
    """'; ' and every known cause the exception fits, most likely first (with its rules), or '' if none does."""
    kind, text = type(exc).__name__, str(exc)
    found = [(words, rules) for fits, words, rules in KNOWN if fits(kind, text, where)]
    if not found:
        return ""
    rules = mark(*dict.fromkeys(rule for _, found_rules in found for rule in found_rules))
    if len(found) == 1:
        return f": {found[0][0]}{rules}"
    listed = "; ".join(f"({n}) {words}" for n, (words, _) in enumerate(found, 1))
    return f": it fits {len(found)} mistakes, most likely first: {listed}{rules}"
