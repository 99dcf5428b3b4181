"""What a save does to the files of one folder, in the order it happens: stage 3a's `watched`.

An audit hook (`sys.addaudithook`: Python calls it at each audited operation of this process) notes each
open, link, rename and removal of a path in the folder, the folder itself included; `os.fsync`, which raises
no audit event, is noted through `files.fsyncs_noted` while the block runs, with the file's size. Writes and
closes are not noted. A temporary name (one starting with a dot, new at every save) is shown numbered by its place.

The hook is the one of `audited(note)`, which stage 3c's write watch (`orbax_lesson.watch_writes`) uses too;
`paths_in(args, folder)` reads the paths an operation names, if every one lies in the folder.
"""

import contextlib
import os
import sys

from shardlab.core import files
from shardlab.io import inside

_EVENTS = ("open", "os.link", "os.rename", "os.remove")
_WATCH: dict = {"folder": None, "operations": []}  # the folder `watched` watches (None: none) and what was noted
_NOTE: list = [None]  # what `audited` hands each audited operation to while a block runs (None: nothing)
_HOOKED: list = []  # one audit hook per process: hooks cannot be removed, so it is added once


def _hook(event, args):
    note = _NOTE[0]
    if note is not None:
        note(event, args)


@contextlib.contextmanager
def audited(note):
    """While the block runs, `note(event, args)` for each audited operation of this process. The hook is added once
    per process (hooks cannot be removed) and hands nothing on outside a block."""
    if not _HOOKED:
        sys.addaudithook(_hook)
        _HOOKED.append(True)
    _NOTE[0] = note
    try:
        yield
    finally:
        _NOTE[0] = None


def paths_in(args, folder: str) -> list:
    """The absolute paths among an audited operation's `args` (its descriptors and flags left out), if there is one
    and every one names `folder` or lies in it (not a sibling sharing its prefix); else []."""
    paths = [os.path.abspath(os.fsdecode(a)) for a in args if isinstance(a, (str, bytes, os.PathLike))]
    return paths if paths and all(inside(p, folder) for p in paths) else []


def _shown_as(path: str) -> str:
    """A path under the watched folder as the lines show it; the folder itself by its name."""
    relative = os.path.relpath(path, _WATCH["folder"])
    return f"{os.path.basename(_WATCH['folder'])}/ (the folder)" if relative == "." else relative


def _audit(event, args):
    if event in _EVENTS:
        paths = paths_in(args[:1] if event == "open" else args, _WATCH["folder"])  # open's others: mode and flags
        if paths:
            _WATCH["operations"].append(f"{event:9s} " + " -> ".join(_shown_as(p) for p in paths))


def _fsync(fd):
    number = fd if isinstance(fd, int) else fd.fileno()
    path = os.readlink(f"/proc/self/fd/{number}")
    size = "" if os.path.isdir(path) else f" ({os.fstat(number).st_size} bytes)"
    _WATCH["operations"].append(f"os.fsync  {_shown_as(path)}{size}")


@contextlib.contextmanager
def watched(folder, published=None):
    """The file operations in `folder` while the block runs, as {"operations": [...], "left": [...]}: "left" names
    what the block left in the folder besides `published` (the path it is meant to create)."""
    here = os.path.abspath(folder)
    before = set(os.listdir(here))
    seen = {"operations": []}
    _WATCH["operations"] = seen["operations"]
    with files.fsyncs_noted(_fsync):
        _WATCH["folder"] = here
        try:
            with audited(_audit):
                yield seen
        finally:
            _WATCH["folder"] = None
    lines = seen["operations"]
    named = sorted({w for line in lines for w in line.split()[1:] if w.startswith(".") and len(w) > 1})
    for number, name in enumerate(named, 1):  # a new name every save: numbered here by its place
        lines[:] = [line.replace(name, f"<temporary {number}>") for line in lines]
    expected = {os.path.basename(published)} if published else set()
    seen["left"] = sorted(set(os.listdir(here)) - before - expected)
