"""The learner's implementation as the checks see it: functions that run in another interpreter.

The checking interpreter never imports a learner's file. `RemoteImplementation` stands where the
module would: each of the seven functions, and every callable they return (the step), is a
`RemoteFunction` whose call sends the arguments as data to `checker/worker.py`, waits for its
answer within the bounds, and gives back what the learner's function returned, raised, or changed
in its arguments. The comparisons with the oracle and every verdict happen here, in a process the
learner's code never runs in, so nothing the learner's code does to its own interpreter (replacing
the checker's functions, printing verdict lines, writing the progress file) reaches a verdict.

The worker may be sandboxed (`checker/sandbox.py`). Between two calls it is stopped (SIGSTOP, every
process it started too), so no learner thread or child touches the scratch folder while the checks
read and write there; a symbolic link it left there that leads out of the folder is removed and the
call fails. The stop signals each process of the tree read from /proc alone (`process_group.signal_pids`),
not the worker's group: a child that left that group for one of its own is stopped too. A worker that
breaks a bound (time, memory; a worker that closed its channel must end within the call's), dies, or
answers with something that is not data is killed with everything it started; the function in
progress is not called again, and the next call starts a new worker.
"""

import contextlib
import errno
import os
import select
import signal
import time

import shardlab.checker.early as early
import shardlab.checker.guard as guard
import shardlab.checker.probes as probes
import shardlab.checker.sandbox as sandbox
import shardlab.checker.wire as wire
from shardlab import process_group
from shardlab.io import inside
from shardlab.learner.implementation import API

GRACE = 5.0  # seconds past the call bound the worker's own alarm has before it is killed
STARTUP_SECONDS = 90.0  # JAX's start in a new interpreter, beyond the bound of importing the file
SCAN_ENTRIES = 20_000  # entries of the scratch folder looked at after each call
# a folder is listed again unless its inode change time is the one the last scan saw and was older than that
# scan's start by this much: the kernel stamps a change with a clock a tick behind, and no call (nor utime, which
# sets the change time to now) can give a changed folder back an old change time
SETTLED_NS = 1_000_000_000
WAIT = 0.05


class Stopped(Exception):
    """The worker broke a bound or stopped answering: the verdict for the call in progress."""


class Worker:
    """One interpreter that has loaded the learner's file, started on the first call and after each death."""

    def __init__(
        self,
        spec: str,
        call_seconds: float = guard.CALL_SECONDS,
        memory_bytes: int = guard.MEMORY_BYTES,
        box: sandbox.Sandbox | None = None,
        scratch: list | str | None = None,
        note=None,
        poisoned: dict | None = None,
        fresh: bool = False,
    ):
        self.fresh = fresh  # a new interpreter with a hash seed of its own every start (checker/early.py)
        self.spec, self.call_seconds, self.memory_bytes = spec, float(call_seconds), int(memory_bytes)
        self.box = box
        self.scratch = [scratch] if isinstance(scratch, str) else list(scratch or [])
        self.note = note or (lambda **event: None)
        self.poisoned = poisoned if poisoned is not None else {}
        self.process, self.generation, self.hello = None, 0, {}
        self._listed, self._scan_start = {}, 0  # folder -> (identity, change time, subfolders, entries) at a scan
        self._stopped = None  # the tree as the last freeze stopped it (`_thaw` resumes exactly these)

    # ------------------------------------------------------------------ the process

    def start(self, launched: "early.Launched | None" = None) -> dict:
        """Start the interpreter (or adopt `launched`, one started early) and read its hello.

        The hello holds its pid, JAX and the error loading the file raised, if any.
        """
        if launched is None:
            launched = early.launch(self.spec, self.call_seconds, self.poisoned, self.box, self.scratch, self.fresh)
        self.process, self.send_fd, self.reply_fd = launched.process, launched.send_fd, launched.reply_fd
        self.generation += 1
        self.inner = None
        try:
            header, _ = self._receive("importing the file", self.call_seconds + STARTUP_SECONDS)
            hello = header.get("hello")
            if not isinstance(hello, dict) or not isinstance(hello.get("pid"), int):
                raise Stopped("answered its start with something other than its hello")
        except Stopped as stopped:
            self.stop()
            return {"error": {"text": f"`importing the file` {stopped}", "cause": str(stopped), "known": True}}
        self.inner, self.hello = hello["pid"], hello
        self._freeze()
        if "error" in hello:
            self.stop()
        return hello

    def stop(self) -> None:
        """Kill the interpreter and everything it started; close the channel."""
        if self.process is None:
            return
        for descriptor in (self.send_fd, self.reply_fd):
            with contextlib.suppress(OSError):
                os.close(descriptor)
        self._stopped = None
        self._signal_all(signal.SIGCONT)
        process_group.kill(self.process)
        self.process = None

    def _tree(self) -> list[int]:
        """Host pids of the interpreter's process and every descendant (bwrap's included)."""
        return sandbox.descendants(self.process.pid) if self.process is not None else []

    def _signal_all(self, number: int, found: list | None = None, tries: int = 3) -> list | None:
        """Signal the tree (`found`, else read now); for SIGSTOP, the tree once it stopped growing (else None)."""
        for _ in range(tries):  # a process may fork while it is being stopped: look again
            found = found if found is not None else self._tree()
            process_group.signal_pids(found, number)
            if number != signal.SIGSTOP:
                return None
            again = self._tree()
            if found == again:
                return found
            found = again
        return None

    def _freeze(self) -> None:
        # the interpreter first (its pid stays ours until it is reaped), then the tree read once it is stopped: a
        # call that left no other process is confirmed by that one read; a tree with more is stopped whole and
        # read again until it stops growing (one try more than a start from a read tree)
        root = [self.process.pid] if self.process is not None else None
        self._stopped = self._signal_all(signal.SIGSTOP, root, tries=4)

    def _thaw(self) -> None:
        # a tree whose every process is stopped cannot have grown since: the list read when it stopped is the tree
        stopped, self._stopped = self._stopped, None
        self._signal_all(signal.SIGCONT, stopped)

    def _host_pid(self) -> int:
        return sandbox.host_pid(self.process.pid, self.inner) if self.process else 0

    def _why_ended(self) -> str:
        return guard.ended_verdict(self.process.poll() if self.process else None, "the interpreter running it")

    def _receive(self, function: str, seconds: float) -> tuple[dict, list]:
        start, deadline = guard.resident_bytes(self._host_pid()), time.monotonic() + seconds

        def wait():
            while True:
                ready, _, _ = select.select([self.reply_fd], [], [], WAIT)
                if ready:
                    return
                if time.monotonic() > deadline:
                    raise Stopped(guard.loop_verdict(function, self.call_seconds))
                if self.inner and guard.resident_bytes(self._host_pid()) - start > self.memory_bytes:
                    raise Stopped(guard.memory_verdict(self.memory_bytes))

        try:
            return wire.receive(self.reply_fd, wait)
        except EOFError:  # the worker closed its end: it ends within the call's bound, or is killed with its group
            if self.process is not None:
                late = process_group.until(self.process, lambda: time.monotonic() > deadline or None, WAIT)
                if late:
                    raise Stopped(guard.loop_verdict(function, self.call_seconds)) from None
            raise Stopped(self._why_ended()) from None
        except wire.WireError as exc:
            raise Stopped(f"answered with something that is not a value the checker reads ({exc})") from None

    # ------------------------------------------------------------------ calls

    def _ended(self, function: str, verdict: str):
        self.stop()
        text = verdict if verdict.startswith("`") else f"`{function}` {verdict}"
        self.poisoned[function] = text
        return guard.Overrun(text)

    def request(self, header: dict, args: tuple, kwargs: dict, function: str, seconds: float):
        """Send one call or probe; return what came back (raising what the learner's code raised)."""
        if function in self.poisoned:
            raise guard.Overrun(f"{self.poisoned[function]}; not called again in this run")
        if self.process is None:
            hello = self.start()
            if "error" in hello:
                raise guard.Overrun(hello["error"]["text"])
        args = list(args)
        for value in (*args, *kwargs.values()):  # a step a dead worker made is made again in this one
            if isinstance(value, RemoteFunction) and value.name not in self.poisoned:
                value._current()
        encoder = wire.Encoder()
        message = {**header, "args": [encoder.encode(a) for a in args], "cwd": self._folder()}
        message["kwargs"] = {str(k): encoder.encode(v) for k, v in kwargs.items()}
        reply, blobs = self._exchange(message, encoder.blobs, function, seconds)
        left = self._scan()
        try:
            value = self._decode(reply, blobs, args)
        except (wire.WireError, KeyError, TypeError, ValueError, IndexError) as exc:
            raise self._ended(
                function, f"answered with something that is not a value the checker reads ({exc})"
            ) from None
        if left:
            raise self._ended(function, left)
        if "overrun" in reply:
            self.poisoned.setdefault(function, str(reply["overrun"]))
            raise guard.Overrun(str(reply["overrun"]))
        if "raised" in reply:
            raise wire.rebuilt(reply["raised"])
        return value

    def _folder(self) -> str | None:
        """The folder the call runs in: this one where it is a scratch folder (a bare file name), else the first."""
        try:
            here = os.path.realpath(os.getcwd())
        except OSError:
            here = None
        roots = [os.path.realpath(folder) for folder in self.scratch]
        if here and any(inside(here, root) for root in roots):
            return here
        return roots[0] if roots else None

    def _exchange(self, message: dict, blobs: list, function: str, seconds: float) -> tuple[dict, list]:
        """Let the worker run, send `message`, read its answer within `seconds`, and stop it again."""
        self.note(event="call", function=function, rss=guard.resident_bytes(), at=time.time())
        try:
            self._thaw()
            wire.send(self.send_fd, message, blobs)
            reply, blobs = self._receive(function, seconds)
            if isinstance(reply.get("course_code"), str):  # graded, the call reached the course's (checker/seal.py)
                self.note(event="course_code", message=reply["course_code"][:600])
            return reply, blobs
        except Stopped as stopped:
            raise self._ended(function, str(stopped)) from None
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.EBADF):
                raise
            raise self._ended(function, self._why_ended()) from None
        finally:
            if self.process is not None:
                self._freeze()
            self.note(event="return", function=function)

    def _decode(self, reply: dict, blobs: list, args: list):
        split = reply["split"]
        if not isinstance(split, int) or not 0 <= split <= len(blobs):
            raise wire.WireError("an answer without its split")
        changes = wire.Decoder(blobs[split:], handle=self._function)
        for index, node in reply.get("changes", []):
            if isinstance(index, int) and 0 <= index < len(args):
                wire.write_back(args[index], node, changes)
        if "ok" not in reply:
            return None
        return wire.Decoder(blobs[:split], handle=self._function, args=args).decode(reply["ok"])

    def _function(self, number, node) -> "RemoteFunction":
        if not isinstance(number, int):
            raise wire.WireError("a returned function must be a handle number")
        return RemoteFunction(self, number, str(node.get("name", "a returned function"))[:80], bool(node.get("lower")))

    def _scan(self) -> str | None:
        """Remove every symbolic link in the scratch folders that leads out of them; say which (None if none).

        A folder that has not changed since the last scan (SETTLED_NS) is not listed again: a link, a new entry or
        a removed one changes its folder's change time. Every folder is still looked at (one lstat)."""
        roots = [os.path.realpath(folder) for folder in self.scratch if os.path.isdir(folder)]
        found, seen, start, listed = [], 0, time.time_ns(), {}
        for root in roots:
            todo = [root]
            while todo:  # the kind of each entry comes with the listing (no stat per entry); links are not followed
                folder = todo.pop()
                try:
                    info = os.lstat(folder)
                except OSError:
                    continue
                mark = (info.st_dev, info.st_ino, info.st_mode)
                kept = self._listed.get(folder)
                if kept and kept[:2] == (mark, info.st_ctime_ns) and info.st_ctime_ns < self._scan_start - SETTLED_NS:
                    listed[folder] = kept
                    todo += kept[2]
                    seen += kept[3]
                elif (inner := _listing(folder, root, roots, found)) is not None:
                    listed[folder] = (mark, info.st_ctime_ns, *inner)
                    todo += inner[0]
                    seen += inner[1]
                if seen > SCAN_ENTRIES:
                    self._listed = {}
                    return f"filled its scratch folder with more than {SCAN_ENTRIES} entries"
        self._listed, self._scan_start = ({}, 0) if found else (listed, start)
        if found:
            return f"left symbolic links that lead out of its scratch folder ({'; '.join(found[:3])}); removed"
        return None


def _listing(folder: str, root: str, roots: list, found: list) -> tuple | None:
    """(subfolders, number of entries) of `folder`, each link in it that leads out of `roots` removed and noted in
    `found`; None if it cannot be listed."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return None
    inner = []
    for entry in entries:
        if entry.is_symlink():
            if not any(inside(os.path.realpath(entry.path), root) for root in roots):
                found.append(f"{os.path.relpath(entry.path, root)} -> {os.readlink(entry.path)}")
                os.unlink(entry.path)
        elif entry.is_dir(follow_symlinks=False):
            inner.append(entry.path)
    return tuple(inner), len(entries)


class RemoteFunction(wire.Handle):
    """A learner function (or a callable one returned) that runs in the worker; calling it returns its value here."""

    def __init__(self, worker: Worker, target, name: str, lower: bool = False, origin=None):
        super().__init__(target)
        self.worker, self.name, self._lower, self.origin = worker, name, lower, origin
        self.generation = worker.generation

    def _current(self) -> "RemoteFunction":
        """This handle in the worker now running: a callable a dead worker returned is made again the same way."""
        if isinstance(self.target, str) or self.generation == self.worker.generation:
            return self
        if self.origin is None:
            raise guard.Overrun(f"`{self.name}` was lost with the interpreter that made it")
        maker, args, kwargs = self.origin
        again = maker(*args, **kwargs)
        self.target, self.generation = again.target, again.generation
        return self

    def __call__(self, *args, **kwargs):
        if self.name not in self.worker.poisoned:
            self._current()
        seconds = self.worker.call_seconds + GRACE
        value = self.worker.request({"op": "call", "target": self.target}, args, kwargs, self.name, seconds)
        if isinstance(value, RemoteFunction):
            value.origin = (self, args, kwargs)
        return value

    def probe(self, name: str, *args):
        """Probe `name` (checker/probes.py) of this function, run where it runs."""
        if self.name not in self.worker.poisoned:
            self._current()
        seconds = probes.LONG.get(name, self.worker.call_seconds) + GRACE
        return self.worker.request({"op": "probe", "probe": name}, (self, *args), {}, self.name, seconds)

    @property
    def lower(self):
        if not self._lower:
            raise AttributeError(f"{self.name} has no attribute 'lower'")
        return lambda *args: RemoteLowered(self, args)

    def __repr__(self):
        return f"<{self.name} (run by the implementation's interpreter)>"


class RemoteLowered:
    """`step.lower(*args)` for a remote step: its text and its compiled executable, each computed in the worker."""

    def __init__(self, step: RemoteFunction, args: tuple):
        self.step, self.args = step, args

    def as_text(self) -> str:
        return str(self.step.probe("lowered_text", *self.args))

    def compile(self):
        return lambda *call: self.step.probe("compiled_call", self.args, call)


class RemoteImplementation:
    """The seven functions of a learner's file, each run by `worker`."""

    def __init__(self, worker: Worker):
        self.worker = worker
        self._functions = {name: RemoteFunction(worker, name, name) for name in API}

    def __getattr__(self, name):
        functions = self.__dict__.get("_functions", {})
        if name in functions:
            return functions[name]
        raise AttributeError(f"the implementation is checked through its functions only ({', '.join(API)})")

    def close(self) -> None:
        self.worker.stop()
