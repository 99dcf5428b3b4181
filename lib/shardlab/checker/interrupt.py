"""The one save-interruption harness: see every file operation of a save, and stop or race it there.

`instrument(hook)` routes a (child) process's file operations through `hook(operation,
target, data, handle)` before each runs: every `create` (a name opened for writing by `open`
or `io.open`, which may create or empty it), every `write` and `close` of a file opened for
writing (by `open`, `io.open` or `os.fdopen`), every `os.write` to a file (a pipe or terminal is not
counted), and every os-level open, mkdir, rename, replace, link, unlink, truncate, fsync and fdatasync.
A publication's two folders are read as the OS resolves them: a `dir_fd` joined, symbolic links followed,
/proc/self/fd/N taken to the file descriptor N opens (an unnamed O_TMPFILE file published with linkat).
Whatever writes a save's bytes (its own `write` calls, `np.savez` given a name or a handle) reaches one
of these. It needs no hook inside the code under test, so the same
harness stops the learner's `save` (the checker), the course's `checkpoint.save` (torture's
zygote) and the savers the tests race.

`interrupted` runs a learner's save in a forked child stopped at operation k: `kill` writes
half of that write's bytes (or none of any other operation) and sends itself SIGKILL, as a
crash would; `fail` makes that operation raise OSError(ENOSPC), as a full disk would, and lets
the save handle it; `race` has a second saver, a separate process forked from the checker before the
first save began (so it shares no lock or set the first holds in memory), run one complete
save to the same path right there, and then lets the first one continue; `no-links:E` makes every os.link
raise OSError(E), as a file system without hard links does, just after a rival's file appeared at the final
name. The parent judges
what is left at the final path. Only the child's own folder is written. Every child has a
time bound (CHILD_TIMEOUT) and a named status.
"""

import builtins
import contextlib
import errno
import io
import json
import os
import random
import signal
import time
import warnings

from shardlab import errors
from shardlab.io import inside

OS_OPERATIONS = (
    *("open", "mkdir", "rename", "replace", "link", "symlink", "unlink", "remove", "truncate", "ftruncate"),
    *("fsync", "fdatasync"),
)
SYNCS = ("fsync", "fdatasync")  # fdatasync also writes the size a reader needs: it syncs what fsync must (rule text)
NOT_REACHED = 3  # child exit status: the save finished before operation k
CHILD_TIMEOUT = 30.0  # seconds one interrupted save may take before it is stopped
MAX_OPERATIONS = 400  # a save of six small arrays needs far fewer; more means a loop


class _Writer:
    """A file opened for writing whose write and close calls are counted."""

    def __init__(self, inner, hook):
        self._inner, self._hook = inner, hook

    def write(self, data):
        self._hook("write", getattr(self._inner, "name", "?"), data, self._inner)
        return self._inner.write(data)

    def close(self):
        self._hook("close", getattr(self._inner, "name", "?"), None, self._inner)
        return self._inner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __getattr__(self, name):
        return getattr(self._inner, name)


def label(operation: str, target) -> str:
    """'<operation> <file name>' of one counted operation (what the hooks report and stop at)."""
    return f"{operation} {os.path.basename(str(target))}"


def instrument(hook) -> None:
    """Route this (child) process's file operations through `hook(operation, target, data, handle)`.

    Only for a process that ends after the operation it watches (a forked child, a subprocess):
    the module-level functions of `io`, `builtins` and `os` are replaced for good.
    """
    original_open = io.open

    def counted_open(file, mode="r", *args, **kwargs):
        writing = any(flag in mode for flag in "wax+")
        if writing and not isinstance(file, int):  # a name opened for writing: it may be created here
            hook("create", file, None, None)
        handle = original_open(file, mode, *args, **kwargs)
        if writing and not isinstance(file, int):
            _name_of(handle.fileno(), file, fstat)
        return _Writer(handle, hook) if writing else handle

    fstat, readlink, stat_of = os.fstat, os.readlink, os.stat
    io.open = builtins.open = counted_open
    for name in OS_OPERATIONS:
        original = getattr(os, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            target = str(args[0]) if args else ""
            if _name in SYNCS and args:
                target = _synced(args[0], fstat, readlink)
            elif _name in ("link", "rename", "replace") and args:
                source = _joined(args[0], kwargs.get("src_dir_fd"), readlink)
                SIZES.append(
                    (_name, os.path.basename(os.path.realpath(source)), _size(lambda: stat_of(source).st_size))
                )
                if len(args) > 1:  # the folder the published file was written in, and its final name's folder
                    final = _joined(args[1], kwargs.get("dst_dir_fd"), readlink)
                    folders = (os.path.dirname(os.path.realpath(source)), os.path.realpath(os.path.dirname(final)))
                    PUBLISHED.append((_name, *folders))
            hook(_name, target, None, None)
            result = _original(*args, **kwargs)
            if _name == "open" and len(args) > 1 and args[1] & _WRITE_FLAGS and isinstance(result, int):
                _name_of(result, args[0], fstat)  # os.open for writing: mkstemp's temporaries and their kin
            return result

        setattr(os, name, counted)
    os.write = _counted_write(os.write, readlink, hook)


class _Descriptor:
    """What a `kill` needs of an `os.write`'s descriptor: writing part of the bytes, and flushing."""

    def __init__(self, fd: int, write):
        self._fd, self._write = fd, write

    def write(self, data):
        return self._write(self._fd, data)

    def flush(self):
        pass


def _counted_write(original, readlink, hook):
    """`os.write` reported to `hook` as a `write` of the file its descriptor names; a write to anything that
    is not a file (a pipe, a terminal), or one made by the hook itself, is passed straight through."""
    inside = []

    def write(fd, data):
        try:
            target = readlink(f"/proc/self/fd/{fd}")
        except (OSError, TypeError, ValueError):
            target = ""
        if inside or not target.startswith("/"):
            return original(fd, data)
        inside.append(fd)
        try:
            hook("write", target, data, _Descriptor(fd, original))
        finally:
            inside.pop()
        return original(fd, data)

    return write


_READLINK = os.readlink  # kept before `instrument` replaces anything in os
SIZES: list = []  # (operation, file name, bytes the kernel held then) of every fsync and publication seen
PUBLISHED: list = []  # (operation, the source's folder, the final name's folder) of every publication seen
NAMED: dict = {}  # (device, inode) -> the first path under which a file was opened for writing or fsynced


def _joined(path, dir_fd, readlink) -> str:
    """`path` as the OS reads it in a call given `dir_fd`: joined to the folder that descriptor opens when relative.

    What it names is then found as a system call finds it (`os.path.realpath`): through symbolic links to
    folders before a '..', and through /proc/self/fd/N to the file descriptor N opens (an O_TMPFILE file
    that has no name yet reads as '<its folder>/#<inode> (deleted)', the name its fsync reports too).
    """
    path = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    if dir_fd is not None and not os.path.isabs(path):
        with contextlib.suppress(OSError):
            path = os.path.join(readlink(f"/proc/self/fd/{dir_fd}"), path)
    return os.path.join(os.getcwd(), path)


def _size(measure):
    try:
        return int(measure())
    except (OSError, TypeError, ValueError):
        return None


def _synced(handle, fstat, readlink) -> str:
    """The path an fsync's descriptor names (its size then noted in SIZES); the descriptor itself if unknown."""
    try:
        descriptor = handle if isinstance(handle, int) else handle.fileno()
        path = readlink(f"/proc/self/fd/{descriptor}")
    except (OSError, AttributeError, TypeError, ValueError):
        return str(handle)
    SIZES.append(("fsync", os.path.basename(path), _size(lambda: fstat(descriptor).st_size)))
    _name_of(descriptor, path, fstat)
    return path


def _name_of(descriptor: int, path, fstat) -> None:
    """Note the file `descriptor` opens under its first name: where its bytes were written, as the OS names it
    (/proc/self/fd/N, which resolves symbolic links to folders and '..' as the open did; `path` if unreadable)."""
    try:
        found = fstat(descriptor)
    except (OSError, TypeError, ValueError):
        return
    try:
        named = _READLINK(f"/proc/self/fd/{descriptor}")
    except (OSError, TypeError, ValueError):
        named = os.path.abspath(os.fspath(path))
    NAMED.setdefault((found.st_dev, found.st_ino), named)


PUBLISH = ("link", "rename", "replace", "symlink")  # the operations that give a written file its final name


def targets(operations: list, kinds: tuple) -> list[str]:
    """The targets of the operations of `kinds` among `operations` ('open x.npz' -> 'x.npz'), in order."""
    return [label.partition(" ")[2] for label in operations or () if label.partition(" ")[0] in kinds]


def unseen_publication(final: str, operations: list, absent: list) -> dict | None:
    """A publication no counted operation made, observed on the file system: after a save whose counted
    operations hold no link, rename or replace, the final name holds a file opened for writing (or fsynced)
    under another name (a rename made through ctypes or a system call of its own). It happened after the last
    counted operation before which the name was still absent: {"position": how many counted operations ran
    before it, "source": the file's earlier name, "size": its bytes now, "folder": the folder it was written
    in}. None otherwise."""
    if targets(operations, PUBLISH):
        return None
    try:
        found = os.lstat(final)
    except OSError:
        return None
    source = NAMED.get((found.st_dev, found.st_ino))
    if source is None or source == os.path.realpath(final) or not any(absent):
        return None
    position = max(i for i, gone in enumerate(absent) if gone) + 1
    return {
        "position": position,
        "source": os.path.basename(source),
        "size": found.st_size,
        "folder": os.path.dirname(source),
    }


def refusal(exc: Exception) -> dict:
    """How a save refused: its text, and whether it is the course's CheckpointExistsError."""
    return {
        "text": f"refused: {type(exc).__name__}: {exc}"[:300],
        "exists": isinstance(exc, errors.CheckpointExistsError),
    }


def _rival(save, rival: tuple, report: str, go: int, done: int) -> int:
    """Body of the rival saver: wait for the first save's signal, save once, report, and say so."""
    if not os.read(go, 1):  # the first save ended before its stop point: nothing to race
        return NOT_REACHED
    seen = []  # the rival's own file operations: which names it made, wrote, published and removed
    instrument(lambda operation, target, data, handle: seen.append(label(operation, target)))
    outcome = _save_here(save, rival)
    outcome["rival_operations"] = seen[:MAX_OPERATIONS]
    with open(report, "w") as handle:
        json.dump(outcome, handle)
    os.write(done, b"d")
    return 0


def _run_rival(go: int, done: int, report: str) -> dict:
    """From inside the first save: let the rival save now and wait until it has, or died (its end of `done` closes).

    No bound of its own: one here would let the first save go on, and be judged, beside a rival that was only slow;
    the parent's bound on both children (`interrupted`) stops a rival that never reports, as a hung save."""
    os.write(go, b"g")
    if not os.read(done, 1):
        return {"rival": "died before it reported"}
    with open(report) as handle:
        return json.load(handle)


RIVAL_BYTES = b"another saver's checkpoint, published while this save wrote its own\n"


def _link_refused(final: str, name: str, operation: str, outcome: dict, original_open) -> None:
    """A hard link refused as a file system without them refuses it (errno `name`: EPERM on FAT, EOPNOTSUPP or
    EXDEV elsewhere), after a rival's file appeared at the final name (RIVAL_BYTES, written once, uncounted):
    what the save falls back to must still never overwrite it."""
    if not os.path.lexists(final):
        with original_open(final, "xb") as rival:
            rival.write(RIVAL_BYTES)
    outcome.setdefault("failed_at", operation)
    number = getattr(errno, name)
    raise OSError(number, os.strerror(number), final)


def _listed(folder: str) -> set:
    """The names in `folder`; none while it does not exist (a save paused before making it)."""
    try:
        return set(os.listdir(folder))
    except FileNotFoundError:
        return set()


class ProcessEnding(BaseException):
    """The process told to end while a save runs: like SystemExit from a SIGTERM handler's sys.exit, a BaseException
    that is neither an Exception nor KeyboardInterrupt (SystemExit itself is the bounds' to stop a learner's call)."""


# mode 'fail', after another saver has finished a file of its own (BESIDE) in the folder of the final name
BESIDE_MODE, BESIDE = "fail-beside", "another-saver.npz"
# the interruptions a save is stopped by that are no Exception: the user's Ctrl-C, and the process told to end
INTERRUPTS = {"ctrl-c": KeyboardInterrupt(), "exit": ProcessEnding("the process was told to end")}


def _refused(mode: str, final: str, target, original_open):
    """Raise OSError(ENOSPC) as a full disk does; in BESIDE_MODE, once another saver has finished its file BESIDE in
    the final name's folder."""
    if mode == BESIDE_MODE and os.path.isdir(os.path.dirname(final)):
        with original_open(os.path.join(os.path.dirname(final), BESIDE), "wb") as other:
            other.write(b"another saver's finished checkpoint")
    raise OSError(errno.ENOSPC, "No space left on device", str(target))


def descriptors() -> dict:
    """This process's open file descriptors: number -> what it names (a path, a socket, a pipe)."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            found[name] = os.readlink(os.path.join("/proc/self/fd", name))
        except OSError:  # closed meanwhile (the listing's own descriptor among them)
            continue
    return found


def open_under(folder: str, before: dict | None = None) -> list:
    """Sorted paths at or under `folder` named by this process's descriptors (those in `before`, number -> path,
    left out): a removed file's path ends in ' (deleted)'."""
    tops = {os.path.realpath(folder), os.path.abspath(folder)}
    before = before or {}
    return sorted(
        target  # a path, or a pipe's or socket's 'pipe:[...]', never inside
        for number, target in descriptors().items()
        if before.get(number) != target and os.path.isabs(target) and any(inside(target, top) for top in tops)
    )


def _child(save, stop_at: int, mode: str, report: str, first: tuple, rival) -> int:
    """Body of the forked child: save `first`, interrupted at operation `stop_at`; return the exit status.

    `rival` is, for mode 'race', a function that lets the rival process save and returns its outcome."""
    seen, outcome, absent = [], {}, []
    original_kill, original_open = os.kill, io.open
    home, moved = os.getcwd(), []
    # the final name as the OS resolves it: joined to the working directory, never normalised ('a/..' with a a
    # symbolic link is the folder a leads to's parent, not '.')
    final = os.path.join(home, os.fspath(first[0])) if isinstance(first[0], (str, os.PathLike)) else ""

    def hook(operation, target, data, handle):
        seen.append(label(operation, target))
        absent.append(not os.path.lexists(final))  # before the operation runs: when the final name appeared
        if os.getcwd() != home and not moved:  # the process's working directory, which every thread shares
            moved.append({"at": seen[-1], "cwd": os.getcwd()})
        if mode.startswith("no-links:") and operation == "link":
            _link_refused(final, mode.split(":", 1)[1], seen[-1], outcome, original_open)
        if len(seen) != stop_at or outcome.get("rival_ran"):
            return
        if mode in ("fail", BESIDE_MODE):  # the operation is refused as a full disk refuses it; the save goes on
            outcome["failed_at"] = seen[-1]
            _refused(mode, final, target, original_open)
        if mode in INTERRUPTS:  # raised there, as Ctrl-C or a SIGTERM handler's sys.exit raises it: no Exception
            outcome["failed_at"] = seen[-1]
            raise INTERRUPTS[mode]
        if mode == "kill":
            with original_open(report, "w") as note:
                json.dump({"at": seen[-1], "operations": list(seen)}, note)
            if data is not None and handle is not None:
                handle.write(bytes(data)[: len(data) // 2])
                handle.flush()
            original_kill(os.getpid(), signal.SIGKILL)
        outcome["rival_ran"] = True
        outcome["at"] = seen[-1]
        folder = os.path.dirname(final)
        present = _listed(folder)  # the first save is paused here: only the rival acts until it reports
        outcome.update(rival())
        outcome["removed_by_rival"] = sorted(present - _listed(folder))

    instrument(hook)
    # what the save (or its rival here) opened in the folder of this run's cases (where the report is written only
    # later) and left open when it returned, or when it raised: seen while the caller holds the exception, as a
    # caller that logs or keeps it does (its traceback keeps the save's frames, and the files they hold, alive)
    cases, opened = os.path.dirname(os.path.abspath(report)), descriptors()
    try:
        save(*first)
        outcome["left_open"] = open_under(cases, opened)
        outcome["first"] = "saved"
        outcome["unseen_publication"] = unseen_publication(final, seen, absent)
    except (Exception, KeyboardInterrupt, ProcessEnding) as exc:
        outcome["left_open"] = open_under(cases, opened)
        found = refusal(exc)
        outcome.update(first=found["text"], first_exists_error=found["exists"])
    outcome["operations"] = list(seen)
    outcome["pid"], outcome["parent"] = os.getpid(), os.getppid()  # the saver's, and the live process that forked it
    outcome["cwd_moved"] = moved[0] if moved else None
    outcome["sizes"] = [list(entry) for entry in SIZES]
    outcome["published"] = [list(entry) for entry in PUBLISHED]
    with original_open(report, "w") as handle:
        json.dump(outcome, handle)
    return 0 if len(seen) >= stop_at else NOT_REACHED


def stop_points(operations: list[str]) -> list[int]:
    """1-based operations to stop at: every one but writes, and of each run of writes the first, middle and last.

    Writes in the middle of a file are all alike; what differs is before, during and after publication.
    """
    points, run = [], []
    for number, operation in enumerate(operations, start=1):
        if operation.startswith("write"):
            run.append(number)
            continue
        if run:
            points += sorted({run[0], run[len(run) // 2], run[-1]})
            run = []
        points.append(number)
    if run:
        points += sorted({run[0], run[len(run) // 2], run[-1]})
    return points


def _fork(body) -> int:
    """Fork a child that runs `body()` and exits with its status; never returns into the checker there.

    The child's global `random` generator is put back to the state it had here: Python reseeds it in a forked
    child, but a new process that seeds it as this one did (random.seed(seed) in `initial`, "seed everything")
    draws the same numbers. So a killed save and the next save, in two processes one after the other, see
    what two such runs see (NumPy's global generator is never reseeded at a fork).
    """
    inherited = random.getstate()
    with warnings.catch_warnings():  # the children run no JAX code, only the learner's file operations
        warnings.simplefilter("ignore", RuntimeWarning)
        pid = os.fork()
    if pid == 0:
        status = 1
        try:
            random.setstate(inherited)
            status = body()
        finally:
            os._exit(status)
    return pid


def _wait(pid: int, deadline: float):
    """The child's wait status, or None after killing it at `deadline`."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.002)


def _save_here(save, rival: tuple) -> dict:
    """The rival's save run in this process (inside the paused first save, or as the rival process): its outcome."""
    try:
        save(*rival)
        return {"rival": "saved"}
    except Exception as exc:
        found = refusal(exc)
        return {"rival": found["text"], "rival_exists_error": found["exists"]}


def _start(save, stop_at: int, mode: str, report: str, first: tuple, rival: tuple) -> tuple[int, int | None]:
    """(pid of the first saver, pid of the rival process or None): both forked, the pipes between them laid."""
    if mode == "race-here":  # the rival saves in the first saver's own process, as another thread of it would
        rival = rival if len(rival) > 1 else (*rival, *first[1:])  # a path alone: the first's own state, another name
        return _fork(lambda: _child(save, stop_at, mode, report, first, lambda: _save_here(save, rival))), None
    if mode != "race":
        return _fork(lambda: _child(save, stop_at, mode, report, first, None)), None
    go, done = os.pipe(), os.pipe()  # first -> rival: "save now"; rival -> first: "saved"
    rival_report = report + ".rival"

    def rival_body() -> int:
        os.close(go[1])
        os.close(done[0])
        return _rival(save, rival, rival_report, go[0], done[1])

    def first_body() -> int:
        os.close(go[0])
        os.close(done[1])
        return _child(save, stop_at, mode, report, first, lambda: _run_rival(go[1], done[0], rival_report))

    racer = _fork(rival_body)
    pid = _fork(first_body)
    for end in (*go, *done):
        os.close(end)
    return pid, racer


def interrupted(save, stop_at: int, mode: str, report: str, first: tuple, rival: tuple = ()) -> dict:
    """Run `save(*first)` in a forked child stopped (mode 'kill'), failed (mode 'fail': that operation raises
    OSError(ENOSPC) instead of running; mode 'fail-beside': the same, once another saver has written a file of its
    own, BESIDE, in the final name's folder; mode 'ctrl-c': KeyboardInterrupt; mode 'exit': ProcessEnding) or raced at
    operation `stop_at`: by another process (mode 'race') or by a second save in the same process (mode
    'race-here'). Mode 'no-links:E' (E an errno name) stops nowhere: every os.link raises OSError(E) as on a file
    system without hard links, a rival's file (RIVAL_BYTES) having appeared at the final name just before.

    Returns {"status": "killed" | "done" | "not reached" | "hung" | "crashed", ...the child's report}.
    """
    pid, racer = _start(save, stop_at, mode, report, first, rival)
    status = _wait(pid, time.monotonic() + CHILD_TIMEOUT)
    if racer is not None and _wait(racer, time.monotonic() + CHILD_TIMEOUT) is None:
        return {"status": "hung", "who": "the rival saver"}
    if status is None:
        return {"status": "hung"}
    found = {"saver_pid": pid, "caller_pid": os.getpid()}  # the forked saver's pid, and the process saving next
    if os.path.exists(report):
        with open(report) as handle:
            found.update(json.load(handle))
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return {"status": "killed", **found}
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    names = {0: "done", NOT_REACHED: "not reached"}
    return {"status": names.get(code, "crashed"), **found}


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_CHANGES = ("rename", "replace", "link", "symlink", "unlink", "remove", "truncate", "mkdir", "rmdir")


def _refuse(tried: list, what: str, target):
    tried.append(f"{what} {os.path.basename(str(target))}")
    raise OSError(errno.EROFS, "Read-only file system", str(target))


def _guarded_change(name: str, original, top: str, tried: list):
    def call(*args, **kwargs):
        if any(inside(a, top) for a in args[:2]):
            _refuse(tried, f"os.{name}", args[0])
        return original(*args, **kwargs)

    return call


@contextlib.contextmanager
def read_only(folder: str, tried: list):
    """Inside the block, every call that would write under `folder` raises OSError(EROFS), as on a file system
    mounted read-only: an open for writing (`open`, `io.open`, `os.open`), a rename, link, unlink, truncate
    or mkdir there. Reads work. Each refused call is appended to `tried` ('open r+b checkpoint.npz'). And
    `os.access` asked for W_OK there answers False, as access(2) does on a read-only mount (EROFS) for every user,
    root included, whose answer for a mode-0444 file is True: the question is appended too ('os.access W_OK ...').
    The originals come back when the block ends."""
    top = os.path.abspath(folder)
    original_open, original_os_open, original_access = io.open, os.open, os.access
    saved = {name: getattr(os, name) for name in _CHANGES}

    def guarded_open(file, mode="r", *args, **kwargs):
        if any(flag in mode for flag in "wax+") and inside(file, top):
            _refuse(tried, f"open {mode}", file)
        return original_open(file, mode, *args, **kwargs)

    def guarded_os_open(path, flags, *args, **kwargs):
        if flags & _WRITE_FLAGS and inside(path, top):
            _refuse(tried, "os.open for writing", path)
        return original_os_open(path, flags, *args, **kwargs)

    def guarded_access(path, mode, *args, **kwargs):
        if mode & os.W_OK and inside(path, top):
            tried.append(f"os.access W_OK {os.path.basename(str(path))}")
            return False
        return original_access(path, mode, *args, **kwargs)

    io.open = builtins.open = guarded_open
    os.open, os.access = guarded_os_open, guarded_access
    for name, original in saved.items():
        setattr(os, name, _guarded_change(name, original, top, tried))
    try:
        yield tried
    finally:
        io.open = builtins.open = original_open
        os.open, os.access = original_os_open, original_access
        for name, function in saved.items():
            setattr(os, name, function)
