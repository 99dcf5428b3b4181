"""Invalid arguments, enumerated: every argument the course's rules say a function must refuse, each tried.

Each row is one invalid argument of one learner function, the rule that makes it invalid and how the
checker builds it. The error a refusal must raise is read from the rule's own text (`errors.X` in
`shardlab.learner.rules`), never from running the reference: a rule that names no error type cannot be
a row here. Every row is tried on every run (no sampling), and a refusal must also leave the disk as it
was: the path itself (its kind, bytes, link target or listing) and its folder's listing.

Only what a rule demands is a row. The course's stage 1 notebook shows the course's own functions refusing
a batch size of 0 or -3 and malformed data, but no rule asks a learner's `next_batch`, `initial` or
`make_step` to refuse them (the starter's docstrings state none, and correct files written from the starter
return an empty batch for a batch size of 0); docs/checker.md lists them as the domain no rule covers yet.
"""

import os
import re
from dataclasses import dataclass

import shardlab.errors as errors
from shardlab.core import files
from shardlab.learner import rules


@dataclass(frozen=True)
class Argument:
    """One invalid argument: the function, what it is, the rule that refuses it, how to lay it out on disk."""

    function: str
    name: str
    rule: str
    layout: str  # what `lay_out` puts at the path before the call


def error_of(rule_id: str) -> type:
    """The course's error type the rule's text names (`errors.X`): the one expected answer."""
    found = re.findall(r"errors\.(\w+Error)", rules.BY_ID[rule_id].text)
    if len(found) != 1:
        raise ValueError(f"rule:{rule_id} names {found}, not exactly one course error type")
    return getattr(errors, found[0])


# The save path: rule:never-overwrite, "a path that exists is refused". Every kind of existing name.
# The restore path: rule:validate-fields, "unreadable or cut files". Every kind of name np.load cannot read.
ARGUMENTS = (
    Argument("save", "a path holding a checkpoint", "never-overwrite", "checkpoint"),
    Argument("save", "a path holding an empty file", "never-overwrite", "empty file"),
    Argument("save", "a path that is an empty folder", "never-overwrite", "empty folder"),
    Argument("save", "a path that is a folder holding a file", "never-overwrite", "full folder"),
    Argument("save", "a path that is a symbolic link to a checkpoint", "never-overwrite", "link to checkpoint"),
    Argument("save", "a symbolic link that leads nowhere", "never-overwrite", "dangling link"),
    Argument("restore", "a path that does not exist", "validate-fields", "nothing"),
    Argument("restore", "a path that is a folder", "validate-fields", "empty folder"),
    Argument("restore", "a path holding an empty file", "validate-fields", "empty file"),
    Argument("restore", "a symbolic link that leads nowhere", "validate-fields", "dangling link"),
    Argument("restore", "a path holding the checkpoint's first half", "validate-fields", "half checkpoint"),
    # a path that does not exist, with a valid checkpoint beside it under the name np.savez would give it (.npz
    # added) or the name without it: a restore that reads a name other than the one given accepts it
    Argument("restore", "a path that does not exist, a checkpoint at it + '.npz'", "validate-fields", "npz added"),
    Argument("restore", "a path that does not exist, a checkpoint at it less '.npz'", "validate-fields", "npz removed"),
    Argument("restore", "a path that is a folder holding checkpoint.npz", "validate-fields", "folder of a checkpoint"),
    # a path that does not exist whose name, read as a glob pattern, matches a checkpoint beside it: '*', '?' and '['
    # are letters of a name, so a restore that expands the pattern (glob, fnmatch) reads another file
    Argument(
        "restore",
        "a path that does not exist, a checkpoint its name matches as a pattern",
        "validate-fields",
        "pattern match",
    ),
    # the same for a restore that tidies the path: its trailing separator stripped, its backslash taken for '/'
    Argument("restore", "a path ending in a separator, a checkpoint at it without", "validate-fields", "separator"),
    Argument("restore", "a path holding a backslash, a checkpoint at it read as '/'", "validate-fields", "backslash"),
)
PATTERN = "check[p]oint-?*.npz"  # the file name of the "pattern match" row: glob reads it as checkpoint-<x...>.npz
# the file name each row is tried with, where it is not checkpoint.npz
FILE_NAMES = {"pattern match": PATTERN, "separator": "checkpoint.npz" + os.sep, "backslash": "run\\checkpoint.npz"}
# layout -> the neighbour name of a free path where its row lays the checkpoint: the path with .npz added or
# removed, a name its file name matches as a glob pattern, the path with its trailing separator stripped or its
# backslash taken for '/'
BESIDE = {
    "npz added": lambda path: path + ".npz",
    "npz removed": lambda path: os.path.splitext(path)[0],
    "pattern match": lambda path: os.path.join(os.path.dirname(path), "checkpoint-2.npz"),
    "separator": lambda path: path.rstrip(os.sep),
    "backslash": lambda path: path.replace("\\", "/"),
}


def lay_out(layout: str, path: str, checkpoint: bytes) -> None:
    """Put at `path` what `layout` names (`checkpoint`: the bytes of a real checkpoint of this run)."""
    folder = os.path.dirname(path.rstrip(os.sep))
    os.makedirs(folder, exist_ok=True)
    if layout in ("checkpoint", "empty file", "half checkpoint"):
        with open(path, "wb") as handle:
            handle.write({"checkpoint": checkpoint, "empty file": b""}.get(layout, checkpoint[: len(checkpoint) // 2]))
    elif layout in ("empty folder", "full folder", "folder of a checkpoint"):
        os.makedirs(path)
        if layout == "full folder":
            with open(os.path.join(path, "inside.txt"), "w") as handle:
                handle.write("a file the save must not touch\n")
        if layout == "folder of a checkpoint":  # the name a run folder's checkpoint often has
            with open(os.path.join(path, "checkpoint.npz"), "wb") as handle:
                handle.write(checkpoint)
    elif layout == "link to checkpoint":
        target = os.path.join(folder, "target.npz")
        with open(target, "wb") as handle:
            handle.write(checkpoint)
        os.symlink("target.npz", path)
    elif layout in BESIDE:  # the path itself stays free: a checkpoint under a name a restore might read instead
        beside = BESIDE[layout](path)
        os.makedirs(os.path.dirname(beside), exist_ok=True)
        with open(beside, "wb") as handle:
            handle.write(checkpoint)
    elif layout == "dangling link":
        os.symlink("nowhere.npz", path)
    elif layout != "nothing":
        raise ValueError(f"unknown layout {layout!r}")


def disk(path: str) -> tuple:
    """What a refusal must leave as it was: every name in the folder, with its kind and bytes or link target, and a
    file's or folder's permissions and a file's modification time (os.utime or os.chmod change them, not its bytes);
    a folder's own modification time moves with every name made or removed in it, and is left out."""
    folder = os.path.dirname(path.rstrip(os.sep))
    seen = []
    for root, dirs, names in os.walk(folder):
        for name in sorted(dirs + names):
            full = os.path.join(root, name)
            if os.path.islink(full):
                seen.append((os.path.relpath(full, folder), "link", os.readlink(full)))
            elif os.path.isdir(full):
                seen.append((os.path.relpath(full, folder), "folder", oct(os.stat(full).st_mode)))
            else:
                found = os.stat(full)
                kept = (files.sha256_file(full), oct(found.st_mode), f"modified at {found.st_mtime_ns} ns")
                seen.append((os.path.relpath(full, folder), "file", kept))
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
    return tuple(sorted(seen))


def changed(before: tuple, after: tuple) -> list[str]:
    """The names whose kind, bytes or target differ, or that appeared or went."""
    old, new = {row[0]: row[1:] for row in before}, {row[0]: row[1:] for row in after}
    return sorted(name for name in old.keys() | new.keys() if old.get(name) != new.get(name))


def outcome(call, error: type, path: str) -> str | None:
    """None if `call` raised `error` and left the folder of `path` as it was, else what happened instead."""
    before = disk(path)
    try:
        call()
    except NotImplementedError:
        raise
    except error:
        moved = changed(before, disk(path))
        return f"refused, but changed {moved} on disk" if moved else None
    except Exception as exc:
        return f"{type(exc).__name__} (not {error.__name__}): {str(exc)[:120]}"
    moved = changed(before, disk(path))
    return "accepted (no error)" + (f", changed {moved} on disk" if moved else "")
