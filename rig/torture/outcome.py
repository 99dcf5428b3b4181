"""Counting what happened to each torture trial: refused, restored exactly, accepted wrong, lost."""

import hashlib
import os
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from shardlab.core.files import sha256_file
from shardlab.core.state import FIELDS, host_copy
from shardlab.errors import CheckpointError

MAX_EXAMPLES = 5  # failure descriptions kept per category
# What one trial can end as: outcome -> (its Tally column, whether it is a failure that must stay 0)
OUTCOMES = {
    "refused": ("refused", False),
    "exact": ("restored_exact", False),
    "wrong": ("wrong_accepts", True),
    "lost": ("lost", True),
    "unexpected": ("unclear_errors", True),
    "leak": ("leaks", True),
    "hang": ("hangs", True),
    "outside": ("writes_outside_out", True),
}
COUNTERS = {name: column for name, (column, _) in OUTCOMES.items()}
BAD = tuple(name for name, (_, bad) in OUTCOMES.items() if bad)
FAILURES = tuple(COUNTERS[name] for name in BAD)  # the failure columns: every one must be 0
COLUMNS = ("trials", *COUNTERS.values())  # what torture.json reports per category, in this order


def same_state(found: dict, expected: dict) -> bool:
    """True iff every field of `found` is bit-identical (same dtype and bytes) to `expected`."""
    got, want = host_copy(found), host_copy(expected)
    for name in FIELDS:
        a, b = np.asarray(got[name]), np.asarray(want[name])
        if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
            return False
    return True


def tree_digest(folder, leave_out=()) -> str:
    """sha256 over every path, file content and symlink target under `folder` (missing folder -> 'absent').

    `leave_out`: relative paths whose whole subtree is not part of the digest.
    """
    folder = os.fspath(folder)
    if not os.path.lexists(folder):
        return "absent"
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        dirs[:] = [d for d in dirs if os.path.relpath(os.path.join(root, d), folder) not in leave_out]
        for name in sorted(dirs + files):
            path = os.path.join(root, name)
            if os.path.relpath(path, folder) in leave_out:
                continue
            digest.update(os.path.relpath(path, folder).encode())
            if os.path.islink(path):
                digest.update(b"->" + os.readlink(path).encode())
            elif os.path.isfile(path):
                digest.update(sha256_file(path).encode())
    return digest.hexdigest()


@dataclass
class Tally:
    """Per-category counts, one field per COLUMNS entry (a test keeps the two equal); FAILURES stay 0."""

    trials: int = 0
    refused: int = 0
    restored_exact: int = 0
    wrong_accepts: int = 0
    lost: int = 0
    unclear_errors: int = 0
    leaks: int = 0
    hangs: int = 0
    writes_outside_out: int = 0
    errors: Counter = field(default_factory=Counter)
    failures: list = field(default_factory=list)

    def note(self, message: str) -> None:
        """Keep the first few failure descriptions for the report."""
        if len(self.failures) < MAX_EXAMPLES:
            self.failures.append(message)

    def count(self, outcome: str, message: str = "") -> None:
        """Add one outcome (a key of COUNTERS); keep `message` when the outcome is a bad one."""
        setattr(self, COUNTERS[outcome], getattr(self, COUNTERS[outcome]) + 1)
        if message and outcome in BAD:
            self.note(message)

    def attempt(self, label: str, restore, expected: dict | None, bound: float | None = None) -> str:
        """Run `restore()`, classify against `expected` (None: nothing may be accepted); return the outcome.

        A call that takes longer than `bound` seconds also counts as a hang.
        """
        started = time.perf_counter()
        try:
            found = restore()
        except CheckpointError as exc:
            self.errors[type(exc).__name__] += 1
            outcome = "refused"
        except Exception as exc:  # the point of the campaign: any other type is a finding
            self.errors[type(exc).__name__] += 1
            self.count("unexpected", f"{label}: unclear {type(exc).__name__}: {str(exc)[:200]}")
            outcome = "unexpected"
        else:
            outcome = "exact" if expected is not None and same_state(found, expected) else "wrong"
        if outcome != "unexpected":
            self.count(outcome, f"{label}: accepted a state that was never saved as valid")
        seconds = time.perf_counter() - started
        if bound is not None and seconds > bound:
            self.count("hang", f"{label}: took {seconds:.1f} s, over its bound of {bound} s")
        return outcome

    @property
    def clean(self) -> bool:
        """Every failure column is 0."""
        return all(getattr(self, name) == 0 for name in FAILURES)

    def add(self, other: "Tally") -> None:
        """Add another tally's counts, error types and first failures into this one."""
        for name in COLUMNS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors.update(other.errors)
        for message in other.failures:
            self.note(message)

    def as_dict(self) -> dict:
        """The counts torture.json reports, plus error types and the first failures."""
        return {
            **{name: getattr(self, name) for name in COLUMNS},
            "error_types": dict(sorted(self.errors.items())),
            "failures": list(self.failures),
        }


def receipts_digest(folder) -> str:
    """tree_digest of `folder`, leaving out only what a failed run may add beside earlier outputs.

    A failed `run` publishes its partly executed notebook as OUT/failed/<name>.ipynb, its own
    (`run-failed`) section of OUT's manifest; every earlier file, and every other section of
    the manifest, must stay as it was.
    """
    from shardlab import outdir

    folder = os.fspath(folder)
    leave_out, sections = [], []
    for root, _, files in os.walk(folder):
        if outdir.MANIFEST in files:
            rel = os.path.relpath(root, folder)
            leave_out += [os.path.normpath(os.path.join(rel, name)) for name in ("failed", outdir.MANIFEST)]
            found = outdir.read_manifest(root)
            sections.append((rel, sorted((k, repr(v)) for k, v in found.items() if k != "run-failed")))
    digest = hashlib.sha256(tree_digest(folder, leave_out=tuple(leave_out)).encode())
    digest.update(repr(sorted(sections)).encode())
    return digest.hexdigest()
