"""What a save does to the files of one folder, in the order it happens: stage 3a's `watched`.

An audit hook (`sys.addaudithook`: Python calls it at each audited operation of this process) notes each
open, link, rename and removal of a path in the folder, the folder itself included; `os.fsync`, which raises
no audit event, is noted through `files.fsyncs_noted` while the block runs, with the file's size. Writes and
closes are not noted. A temporary name (one starting with a dot, new at every save) is shown numbered by its place.
"""

import contextlib
import os
import sys

from shardlab.core import files

_EVENTS = ("open", "os.link", "os.rename", "os.remove")
_WATCH: dict = {"folder": None, "operations": []}  # the folder being watched (None: none) and what was noted
_HOOKED = []  # one audit hook per process: hooks cannot be removed, so it is added once and notes nothing unwatched


def _shown_as(path: str) -> str:
    """A path under the watched folder as the lines show it; the folder itself by its name."""
    relative = os.path.relpath(path, _WATCH["folder"])
    return f"{os.path.basename(_WATCH['folder'])}/ (the folder)" if relative == "." else relative


def _audit(event, args):
    here = _WATCH["folder"]
    if here is None or event not in _EVENTS:
        return
    named = args[:1] if event == "open" else args  # open's other arguments are its mode and flags
    paths = [os.path.abspath(os.fspath(a)) for a in named if isinstance(a, (str, os.PathLike))]
    if paths and all(files.inside(p, here) for p in paths):  # not a sibling sharing its prefix
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
    if not _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED.append(True)
    here = os.path.abspath(folder)
    before = set(os.listdir(here))
    seen = {"operations": []}
    _WATCH["operations"] = seen["operations"]
    with files.fsyncs_noted(_fsync):
        _WATCH["folder"] = here
        try:
            yield seen
        finally:
            _WATCH["folder"] = None
    lines = seen["operations"]
    named = sorted({w for line in lines for w in line.split()[1:] if w.startswith(".") and len(w) > 1})
    for number, name in enumerate(named, 1):  # a new name every save: numbered here by its place
        lines[:] = [line.replace(name, f"<temporary {number}>") for line in lines]
    expected = {os.path.basename(published)} if published else set()
    seen["left"] = sorted(set(os.listdir(here)) - before - expected)
