"""The damage space a learner's restore must refuse: every state field x every kind of damage.

One row per damage: (field, kind, the course rule that makes the file invalid, how the copy is
changed). The restore search applies each row to a checkpoint the learner's own `save` wrote, at
a random step, and also asks that the undamaged file (step 0 and epoch ends included) is accepted.
The course names the six state fields, not the NPZ members that hold them: `locate` finds each
field's member by its value, whatever the learner called it.
Where the lessons are silent (non-finite momentum) the starter's rules (rule:refuse-nan) say what to do, and this
table agrees with them. docs/checker.md prints this table.
"""

import hashlib
import json

import numpy as np

from shardlab.core.schema import FIELDS  # the six state fields (their one home)

SHAPES = "check shapes (stage3a_checkpoint: restore checks shapes)"
DTYPES = "check dtypes (stage3a_checkpoint)"
FINITE = "finite parameters (stage3a_checkpoint)"
FINITE_MOMENTUM = "finite momentum: non-finite momentum cannot continue the run (the starter's rule:refuse-nan)"
NON_FINITE_RULE = {"weights": FINITE, "momentum": FINITE_MOMENTUM}  # the rule a non-finite value of a field breaks
SAVED = "a diverged state saved with a checksum of its own is still refused"  # written by the learner's own save
# the learner's own file with one value made non-finite and its integrity hash made anew
RESEALED = (
    "a diverged state in your file's own format, its integrity hash recomputed over it (as the course's format "
    "writes it), is still refused"
)


NON_FINITE = {"NaN": np.nan, "+inf": np.inf, "-inf": -np.inf}  # the values a diverged run holds


def diverged(values, offset: int = 0):
    """(number, kind, a copy of `values` with one element made NaN, +inf, -inf in turn): the element at
    (offset + number) mod its size; a copy without elements is left as it is."""
    for number, (kind, bad) in enumerate(NON_FINITE.items()):
        changed = np.array(values, copy=True)
        if changed.size:
            changed.flat[(offset + number) % changed.size] = bad
        yield number, kind, changed


def non_finite_rule(field: str, how: str) -> str:
    """The rule a non-finite `field` in a file made `how` (SAVED, RESEALED) breaks, as the learner reads it."""
    return f"{NON_FINITE_RULE[field]}: {how}"


PERMUTATION = "a valid permutation of 0..rows-1 (stage3a_checkpoint)"
CURSOR = "cursor bounds 0 <= cursor <= rows (stage3a_checkpoint)"
STEP = "a non-negative step (stage3a_checkpoint)"
PRESENT = "all six fields are saved (stage3a_checkpoint: missing momentum is refused)"
CONTRACT = (
    "the saved contract must be there and equal the expected one as a whole: a missing contract, one entry "
    "less or one entry more is another experiment's or no experiment's checkpoint (stage3a_checkpoint)"
)


def signed(array) -> np.dtype:
    """The member's integer dtype if it holds -1, else int64: an unsigned cursor or step (a valid choice of save)
    cannot store the damage, so the damaged copy stores it in the widest signed type."""
    kind = np.asarray(array).dtype
    return kind if np.issubdtype(kind, np.signedinteger) else np.dtype(np.int64)


def _set_item(position: int, value):
    def change(a, rows):
        a = np.array(a, copy=True)
        if value is not None and value < 0 and np.issubdtype(a.dtype, np.unsignedinteger):
            a = a.astype(signed(a))  # unsigned ids (a valid choice of save) cannot hold the damage
        a.flat[position] = value
        return a

    return change


def _wider(a, rows):
    return np.concatenate([a, a[:1]])


def _merged_ids(first: int, second: int, fewest: int):
    """The order with ids `first` and `second` both turned into their mean: every id in range and the sum of a
    permutation kept, but no permutation (ids 0 and 2: a test of the range and the sum accepts it; ids 1 and 3, from 5
    rows: the smallest and largest ids kept too). None below `fewest` rows: no such order exists there."""

    def change(a, rows):
        if rows < fewest or np.asarray(a).shape != (rows,):
            return None
        a = np.array(a, copy=True)
        a[(a == first) | (a == second)] = (first + second) // 2
        return a

    return change


def _pair(a, rows):
    return np.stack([a, a])


def _contract_edit(edit):
    """A change of the contract member (JSON text) through `edit(contract) -> contract`; None if it does not apply."""

    def change(a, rows):
        try:
            found = json.loads(str(np.asarray(a)[()]))
        except (ValueError, TypeError, IndexError):
            return None
        if not isinstance(found, dict) or not found:
            return None
        return np.asarray(json.dumps(edit(dict(found)), sort_keys=True))

    return change


def _without_an_entry(contract: dict) -> dict:
    contract.pop(sorted(contract)[0])
    return contract


def _with_an_entry(contract: dict) -> dict:
    return {**contract, "zz_extra": 1}


# (field, kind, rule, change(array, rows) -> damaged array; None removes the member)
DAMAGES = (
    *[(f, "missing", PRESENT, None) for f in FIELDS],
    ("weights", "float64", DTYPES, lambda a, rows: a.astype(np.float64)),
    ("weights", "one element too many", SHAPES, _wider),
    ("weights", "NaN", FINITE, _set_item(0, np.nan)),
    ("weights", "+inf", FINITE, _set_item(-1, np.inf)),
    ("momentum", "float64", DTYPES, lambda a, rows: a.astype(np.float64)),
    ("momentum", "one element too many", SHAPES, _wider),
    ("momentum", "NaN", FINITE_MOMENTUM, _set_item(0, np.nan)),
    ("momentum", "-inf", FINITE_MOMENTUM, _set_item(-1, -np.inf)),
    ("key", "int64", DTYPES + ": a legacy key is uint32", lambda a, rows: a.astype(np.int64)),
    ("key", "shape (3,)", SHAPES + ": a legacy key is uint32 (2,)", lambda a, rows: np.zeros(3, np.uint32)),
    ("order", "float64", DTYPES + ": ids are integers", lambda a, rows: a.astype(np.float64)),
    ("order", "one id too many", PERMUTATION, lambda a, rows: np.concatenate([a, a[:1]])),
    ("order", "one id too few", PERMUTATION, lambda a, rows: a[:-1]),
    ("order", "duplicate id", PERMUTATION, lambda a, rows: np.concatenate([a[:1], a[:-1]]) if rows > 1 else None),
    ("order", "id = rows", PERMUTATION, _set_item(0, None)),  # filled in by `damaged` (needs rows)
    ("order", "id -1", PERMUTATION, _set_item(-1, -1)),
    ("order", "ids in range with a permutation's sum", PERMUTATION, _merged_ids(0, 2, 3)),
    ("order", "ids with a permutation's smallest, largest and sum", PERMUTATION, _merged_ids(1, 3, 5)),
    # a permutation of its own length: only the contract's row count tells it is the order of other data
    ("order", "a permutation of rows - 1 ids", PERMUTATION, lambda a, rows: np.asarray(a)[np.asarray(a) != rows - 1]),
    (
        "order",
        "a permutation of rows + 1 ids",
        PERMUTATION,
        lambda a, rows: np.append(a, rows).astype(np.asarray(a).dtype),
    ),
    ("cursor", "float64", DTYPES + ": the cursor is an integer", lambda a, rows: np.asarray(a, np.float64)),
    ("cursor", "shape (2,)", SHAPES + ": the cursor is one integer", _pair),
    ("cursor", "-1", CURSOR, lambda a, rows: np.asarray(-1, signed(a))),
    ("cursor", "rows + 1", CURSOR, lambda a, rows: np.asarray(rows + 1, np.asarray(a).dtype)),
    ("step", "float64", DTYPES + ": step counts updates", lambda a, rows: np.asarray(a, np.float64)),
    ("step", "shape (2,)", SHAPES + ": step is one integer", _pair),
    ("step", "-1", STEP, lambda a, rows: np.asarray(-1, signed(a))),
    ("contract", "missing", CONTRACT, None),
    ("contract", "one entry less", CONTRACT, _contract_edit(_without_an_entry)),
    ("contract", "one entry more", CONTRACT, _contract_edit(_with_an_entry)),
    ("contract", "a number instead of its text", CONTRACT, lambda a, rows: np.asarray(7, np.int64)),
)
# The structure space: every member in another shape of the same size, another dtype or another type than the
# course's (stage3a_checkpoint, the stage 3 notebook's rule and hint: weights and momentum float32 (d,), key uint32
# (2,), order integer ids (rows,), cursor and step single integers, 0-d). The same numbers in a form the rule rules
# out: a (1,) cursor holds the right value, so a test of its size or of int(cursor) accepts it. `structures` lists
# the space of one field; the restore search draws from it (`drawn`), a few of each field per case.
WRONG_DTYPES = {
    "weights": ("float64", "float16", "int32", "complex64"),
    "momentum": ("float64", "float16", "int32", "complex64"),
    "key": ("int64", "uint64", "int32", "float32"),
    "order": ("float32", "float64", "complex64"),
    "cursor": ("float32", "float64", "complex64"),
    "step": ("float32", "float64", "complex64"),
}
SCALAR_RULE = SHAPES + ": cursor and step are single integers, 0-d arrays"


def _reshaped(shape: tuple):
    return lambda a, rows: np.reshape(np.asarray(a), shape)


def _as(dtype: str):
    return lambda a, rows: np.asarray(a).astype(dtype)


def _as_text(a, rows):
    return np.asarray(str(np.asarray(a).tolist()))


def structures(field: str, value) -> list[tuple]:
    """(kind, rule, change) for every other form of `field` holding the same numbers: each same-size shape, each
    ruled-out dtype, and the numbers as text."""
    shape = np.shape(value)
    rule = SCALAR_RULE if shape == () else SHAPES
    others = [(1,), (1, 1)] if shape == () else [(1, *shape), (*shape, 1)] + ([()] if np.size(value) == 1 else [])
    found = [(f"shape {other} (same numbers)", rule, _reshaped(other)) for other in others if other != shape]
    found += [(f"{dtype} (same numbers)", DTYPES, _as(dtype)) for dtype in WRONG_DTYPES[field]]
    found.append(("the numbers as text", DTYPES, _as_text))
    return found


def drawn(rng: np.random.Generator, arrays: dict, members: dict, per_field: int = 2) -> list[tuple]:
    """(field, kind, rule, change) drawn from each located field's structure space, `per_field` of each."""
    found = []
    for field in FIELDS:
        member = members.get(field)
        if member not in arrays:
            continue
        space = structures(field, arrays[member])
        for number in rng.choice(len(space), size=min(per_field, len(space)), replace=False):
            found.append((field, *space[int(number)]))
    return found


PICKLE = (
    "only an NPZ that np.load(path, allow_pickle=False) reads is a checkpoint: a member holding a pickled object "
    "runs code when it is read"
)


def _touch(path: str) -> str:
    """What the pickled payload runs when it is read: it creates `path` (an empty file) and is the path."""
    with open(path, "a"):
        pass
    return path


EXTRA_PICKLED = "an extra member holding a pickled object array"  # refused, or accepted without reading it


class Marker:
    """A harmless pickled payload: unpickling it creates the file `path`, so a check can see that it ran."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return _touch, (self.path,)


def pickled(arrays: dict, members: dict, marker: str) -> dict:
    """Kind -> a copy of `arrays` with a pickled object array whose payload creates `marker` when read: as an
    extra member beside the intact fields, and in place of the weights' member (if located)."""
    payload = np.array([Marker(marker)], dtype=object)
    extra = "notes"
    while extra in arrays:
        extra += "_"
    found = {EXTRA_PICKLED: {**arrays, extra: payload}}
    if members.get("weights") in arrays:
        found["weights: a pickled object array"] = {**arrays, members["weights"]: payload}
    return found


WHOLE_FILE = {  # damage to the file itself, and a file of another experiment
    "truncated file": "a half-written file is not a checkpoint (read it with np.load; refuse what fails)",
    "not an NPZ file": "only an NPZ written by save is a checkpoint",
    "every member marked encrypted": "a file np.load cannot read is not a checkpoint, whatever error reading it "
    "raises (zipfile's RuntimeError for an encrypted member included)",
    "a member's CRC-32 changed": "a file np.load cannot read is not a checkpoint, whatever error reading it raises",
    "another experiment's contract": "validate the contract before accepting anything (stage3a_checkpoint)",
    "another experiment": "the whole contract must be equal, every entry exactly: one changed input (one ulp of "
    "a number) is another experiment (stage3a_checkpoint)",
}


def json_objects(arrays: dict) -> dict:
    """Member -> the JSON object its text holds, for each 0-d text member of a checkpoint's `arrays` holding one."""
    found = {}
    for name, value in arrays.items():
        if value.dtype.kind not in "US" or value.ndim != 0:
            continue
        try:
            parsed = json.loads(str(value[()]))
        except (ValueError, TypeError):
            continue
        if isinstance(parsed, dict):
            found[name] = parsed
    return found


def holding(arrays: dict, value) -> list[str]:
    """The numeric members of a checkpoint's `arrays` equal to `value`: its shape and its numbers."""
    return [
        n
        for n, a in arrays.items()
        if a.dtype.kind in "biuf" and a.shape == np.shape(value) and np.array_equal(a, value)
    ]


def locate(arrays: dict, state: dict, contract: dict | None = None) -> dict:
    """Field -> the NPZ member that holds it, found by value (so any member names work).

    The member named like the field is taken if it holds the field's value. Otherwise a field is located
    only when exactly one member equals it and that member equals no other field (at step 0 weights and
    momentum are both zeros, cursor and step both 0: under other names neither is located then).
    "contract" is the member holding the contract as JSON text.
    """
    holders = {field: holding(arrays, state[field]) for field in FIELDS if field in state}
    found = {}
    for field, members in holders.items():
        if field in members:
            found[field] = field
        elif len(members) == 1 and sum(members[0] in m for m in holders.values()) == 1:
            found[field] = members[0]
    if contract is not None:
        text = [n for n, found in json_objects(arrays).items() if found == contract]
        if len(text) == 1:
            found["contract"] = text[0]
    return found


def by_field(change, members: dict):
    """`change(arrays)` written for field names, applied to a file whose `members` hold those fields."""

    def renamed(arrays: dict) -> None:
        named = {field: arrays.pop(member) for field, member in members.items() if member in arrays}
        change(named)
        arrays.update({members.get(field, field): value for field, value in named.items()})

    return renamed


def damaged(arrays: dict, member: str | None, kind: str, change, rows: int) -> dict | None:
    """A copy of the checkpoint's `arrays` with one damage applied to `member` (None: it does not apply here)."""
    if member not in arrays:
        return None
    copy = dict(arrays)
    if change is None:
        del copy[member]
        return copy
    if kind == "id = rows":
        change = _set_item(0, rows)
    value = change(np.asarray(arrays[member]), rows)
    if value is None:
        return None
    copy[member] = value
    return copy


def course_integrity(named: dict) -> str:
    """The integrity hash the course's format stores beside the six fields and the contract (stage3a_checkpoint):
    sha256 over each field's and then the contract's name, dtype, shape and bytes, as saved. Written here from the
    lesson's words, not taken from the course's save."""
    digest = hashlib.sha256()
    for field in (*FIELDS, "contract"):
        value = np.ascontiguousarray(named[field])
        digest.update(f"{field}:{value.dtype.str}:{value.shape}:".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def resealed(arrays: dict, members: dict, field: str, value) -> tuple[dict, bool] | None:
    """(a copy of the checkpoint's `arrays` whose `field` member holds `value` in the member's dtype, whether an
    integrity member was recomputed): a text member equal to the course's integrity hash over the located fields and
    contract is made anew over the changed ones, so only a test of the values themselves tells the copy from a valid
    checkpoint. None where `field` (or its dtype) is not found in the file."""
    member = members.get(field)
    if member not in arrays or np.shape(arrays[member]) != np.shape(value):
        return None
    copy = dict(arrays)
    copy[member] = np.asarray(value).astype(np.asarray(arrays[member]).dtype)
    named = {name: arrays[members[name]] for name in (*FIELDS, "contract") if members.get(name) in arrays}
    if len(named) < len(FIELDS) + 1:
        return copy, False
    seal = course_integrity(named)
    sealed = [n for n, a in arrays.items() if a.dtype.kind in "US" and a.shape == () and str(a[()]) == seal]
    for found in sealed:
        copy[found] = np.asarray(course_integrity({**named, field: copy[member]}))
    return copy, bool(sealed)


def name(field: str, kind: str) -> str:
    return f"{field}: {kind}"
