"""While a file is graded, the course's own seven functions are out of its reach: a call into them is seen.

`checker/provenance.py` reads a file's source and sees the plain routes to the course's code (an import,
an assignment, a one-line wrapper). Any other route (`getattr`, `importlib`, `sys.modules`, a string
given to `exec`) is invisible to the syntax tree but not at run time. So, when `grade` runs a file
(SEAL_ENV set), the worker calls `seal()` before the file loads:

- every function of the course's implementation of the seven (SEALED), and every function the modules
  implementing them define (IMPLEMENTATION: the helpers one level lower and below, `sampler.advance`,
  `batch.pad`, `update.map_step`, `files.publish_new`, ..., and a function `jax.jit` wraps there), less what
  the starter hands the learner (HANDED), and every name bound to one in a module already loaded
  (`shardlab.initial` included), is replaced by a stand-in that raises CourseCodeError naming the learner's
  function being called (CALLING) and the course object reached. A stand-in holds only that name: the
  original functions are dropped, and `seal` refuses to go on if any of them is still alive anywhere in
  the process;
- an audit hook (`sys.addaudithook`: Python code cannot remove one) refuses to open those modules' source
  or bytecode files again, whatever path names them, and to link to them, so `importlib.reload` or
  `spec_from_file_location` cannot rebuild the originals. It also refuses what could rewrite it in
  place: setting the `__code__` or `__defaults__` of a function running its code, `ctypes`, and opening
  `/proc/*/mem` (a file's own functions keep theirs to change: `typing.NamedTuple` sets defaults). It
  refuses starting another process or program (a `cat` of the course's source runs outside its view), and
  `_posixsubprocess.fork_exec`, which starts one without an audit event, is replaced. The hook
  keeps everything it uses in its own default values (a tuple), not in names a file could rebind.

The worker itself calls none of the sealed functions (it calls the learner's functions, the probes and the
wire codec, which use only the course's classes, `Batch`, `Dataset`, `Config`, and its errors), so nothing
of the checker needs the originals. The stand-in's error is recognised in the checking
interpreter (`reached`) by its type and message, and `grade` scores that stage `course code`. A learner's
`except BaseException` around a stand-in gets nothing usable back, so the checks fail; the stand-in also
notes the reach (REACHED), and the worker's reply to that call carries it, so the stage is `course code`
all the same. That note lives in the file's own interpreter until the reply leaves: a file that finds
and empties the list before the worker reads it hides the note (not the failure). No record made inside
that interpreter can be out of its reach; only the stand-in's uselessness is.
The course's source pasted into the file is not a call: `checker/provenance.py` compares the file's functions
with the course's, from the source.
"""

import contextlib
import gc
import os
import re
import sys
import types
import weakref
from typing import NamedTuple

from shardlab.errors import CourseCodeError

SEAL_ENV = "SHARDLAB_SEAL_COURSE"  # set by `grade` (handin/bounded.py) for the checker and its workers

# the course's seven functions: the core's first, then the reference's wrappers
SEALED = {
    "shardlab.core.state": ("initial", "transition"),
    "shardlab.core.batch": ("next_batch",),
    "shardlab.core.update": ("make_step",),
    "shardlab.core.checkpoint": ("contract", "save", "restore"),
    "shardlab.learner.reference": ("initial", "next_batch", "make_step", "transition", "contract", "save", "restore"),
}
# the modules that implement them (the seven and every helper they call, down to the file operations): while
# graded, every function these modules define is sealed like the seven, except what the learner is handed
IMPLEMENTATION = (
    "shardlab.core.archive",
    "shardlab.core.batch",
    "shardlab.core.checkpoint",
    "shardlab.core.files",
    "shardlab.core.fixtures",
    "shardlab.core.sampler",
    "shardlab.core.schema",
    "shardlab.core.state",
    "shardlab.core.update",
    "shardlab.learner.reference",
)
# What the starter (learner/templates/starter.py) hands the learner on purpose, never sealed: the one place
# this list lives (docs/handin.md). Whole modules: the exception types and the configuration (`Config` checks
# itself with `check_seed`/`check_batch_size`, which stay its own); and the container `next_batch` returns.
# Classes and constants (`Batch`, `Dataset`, `FIELDS`, `AXIS`, ...) are never sealed: only functions are.
# `shardlab.core.devices` (making the mesh) implements none of the seven and is not sealed either.
HANDED = {
    "shardlab.errors": "*",
    "shardlab.core.errors": "*",
    "shardlab.core.config": "*",
    "shardlab.core.batch": ("Batch",),
}
# The checker's own guards, which run while a file runs (the read-only guard and the descriptor scan), call only
# helpers of modules the seal leaves alone (`shardlab.io.inside`), never one of these: a sealed helper would report
# the checker's call as the learner's.
CALLING = ["loading the file"]  # the learner's function the worker is calling (checker/worker.py sets it)
# what the stand-ins were asked since the worker's last reply, which carries it. Not the hook's refusals: those
# are also raised where nothing of the file asked (a traceback's or a warning's look-up of a course line).
REACHED: list = []
MESSAGE = "{function} reached the course's own {course} while graded: {what}"
COURSE_CODE = "course code: "  # how a check's diagnosis starts when a stand-in's error failed it
PATTERN = re.compile(r"(?P<function>.{1,120}?) reached the course's own (?P<course>shardlab(?:\.\w+)+) while graded: ")


def _stand_in(course: str):
    def stand_in(*args, **kwargs):
        REACHED.append(MESSAGE.format(function=CALLING[0], course=course, what="a stand-in that computes nothing"))
        raise CourseCodeError(REACHED[-1])

    stand_in.__name__ = stand_in.__qualname__ = course.rpartition(".")[2]
    return stand_in


def _files(modules: list) -> tuple[tuple, tuple]:
    """(((st_dev, st_ino), module name) of each module's source and bytecode files, (base name, module name))."""
    import importlib.util

    found, names = set(), set()
    for module in modules:
        source = module.__file__
        cache = os.path.dirname(importlib.util.cache_from_source(source))
        stem = os.path.basename(source)[:-3] + "."
        paths = [source, importlib.util.cache_from_source(source)]
        with contextlib.suppress(OSError):  # the bytecode of every optimisation level
            paths += [os.path.join(cache, name) for name in os.listdir(cache) if name.startswith(stem)]
        for path in paths:
            names.add((os.path.basename(path), module.__name__))
            try:
                info = os.stat(path)
            except OSError:
                continue
            found.add(((info.st_dev, info.st_ino), module.__name__))
    return tuple(sorted(found)), tuple(sorted(names))


def _which(text, path, files, names, _stat=os.stat, _oserror=OSError):
    """The course module whose source or bytecode `path` opens, else None (no globals: see `_hook`)."""
    base, course = text.rstrip("/").rpartition("/")[2], None
    if not text.startswith("/"):  # relative (perhaps to a dir_fd, which the event does not show): by name
        for name, module in names:
            if name == base:
                course = module
    if course is None:
        try:
            info = _stat(path)
        except _oserror:
            return None
        for key, module in files:
            if key == (info.st_dev, info.st_ino):
                course = module
    return course


def _forking(event, getframe, forkers) -> bool:
    """Whether `event` is an `os.fork` called by one of `forkers` (code objects: the checker's forked saves,
    checker/interrupt.py). Frames: this one, the hook's, then the caller of `os.fork`. No globals (see `_hook`)."""
    if event != "os.fork":
        return False
    code = getframe(2).f_code
    for forker in forkers:
        if code is forker:
            return True
    return False


def _hook(
    event,
    args,
    _files=(),
    _names=(),
    _calling=CALLING,
    _message=MESSAGE,
    _which=_which,
    _fspath=os.fspath,
    _isinstance=isinstance,
    _str=str,
    _bytes=bytes,
    _error=CourseCodeError,
    _exception=Exception,
    _opening=frozenset({"open", "os.link", "os.symlink"}),
    _setting=frozenset({"__code__", "__defaults__", "__kwdefaults__"}),
    _type=type,
    _function=types.FunctionType,
    _spawning=frozenset({"subprocess.Popen", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork"})
    | frozenset({"os.forkpty"}),
    _forking=_forking,
    _getframe=sys._getframe,
    _forkers=(),  # `seal` fills it in
    _guarded=(),  # last: `seal` fills it in
):
    """The audit hook `seal` installs (its defaults bound there). It reads no global name (a file could rebind
    one): everything it uses is in its defaults, a tuple no code may replace while it runs. `_guarded` holds
    the code of the hook, `_which` and `_forking`: a function running one of them keeps its code and defaults, whatever
    finds it (`gc.get_objects()`); any other function's may change (`typing.NamedTuple` sets `__new__`'s
    defaults, a decorator may set a wrapper's code)."""
    if event == "object.__setattr__" and args[1:2] and args[1] in _setting and _type(args[0]) is _function:
        code = args[0].__code__
        for guarded in _guarded:
            if code is guarded:
                raise _error("while graded, the seal's own code and defaults may not be replaced")
    if event.startswith("ctypes.") or (event in _spawning and not _forking(event, _getframe, _forkers)):
        raise _error(f"while graded, a file may not use ctypes or start another process or program ({event})")
    if event not in _opening or not args:
        return
    path = args[0]
    if not _isinstance(path, (_str, _bytes)):
        try:
            path = _fspath(path)
        except _exception:
            return
    text = path.decode("utf-8", "surrogateescape") if _isinstance(path, _bytes) else path
    if text.startswith("/proc/") and text.rstrip("/").endswith("/mem"):
        raise _error("while graded, the process's memory file is refused")
    course = _which(text, path, _files, _names)
    if course is not None:
        raise _error(_message.format(function=_calling[0], course=course, what="its source may not be read again"))


def _no_fork_exec() -> None:
    """Replace `_posixsubprocess.fork_exec` (which starts a program without an audit event) wherever it is
    bound, and refuse to go on if the original is still alive (the hook refuses the audited routes)."""
    import _posixsubprocess
    import subprocess

    def fork_exec(*args, **kwargs):
        raise CourseCodeError("while graded, a file may not start another process or program")

    key = id(_posixsubprocess.fork_exec)
    for module in (_posixsubprocess, subprocess):
        for name in ("fork_exec", "_fork_exec"):
            if hasattr(module, name):
                setattr(module, name, fork_exec)
    gc.collect()
    if any(id(o) == key and type(o) is type(len) for o in gc.get_objects()):
        raise CourseCodeError("_posixsubprocess.fork_exec is still reachable after sealing")


def _defined(value, module: str) -> bool:
    """Whether `value` is a function `module` defines (or wraps there, as `jax.jit` wraps one); not a class."""
    if isinstance(value, type):
        return False
    target = getattr(value, "__wrapped__", value)
    return isinstance(target, types.FunctionType) and target.__module__ == module


def sealed() -> dict:
    """Module -> the names of the functions it defines that `seal` replaces: the implementation's, less HANDED."""
    import importlib

    found = {}
    for name in IMPLEMENTATION:
        handed = HANDED.get(name, ())
        if handed != "*":
            names = vars(importlib.import_module(name))
            found[name] = tuple(sorted(k for k, v in names.items() if k not in handed and _defined(v, name)))
    return found


def _originals() -> dict:
    """id -> (a course function, its stand-in): each sealed function, and the one a wrapper of it (`jax.jit`) holds."""
    originals = {}
    for module, names in sealed().items():
        for name in names:
            value = getattr(sys.modules[module], name)
            stand_in = _stand_in(f"{module}.{name}")
            for each in (value, getattr(value, "__wrapped__", value)):
                originals.setdefault(id(each), (each, stand_in))
    return originals


def _replace(originals: dict) -> list:
    """Bind the stand-ins wherever a loaded module binds an original; weak references to the originals."""
    for module in list(sys.modules.values()):
        try:
            names = vars(module)
        except TypeError:
            continue
        for key, value in list(names.items()):
            if id(value) in originals and originals[id(value)][0] is value:
                names[key] = originals[id(value)][1]
    alive = []
    for value, _ in originals.values():
        with contextlib.suppress(TypeError):  # a wrapper without weak references: the function it holds is checked
            alive.append(weakref.ref(value))
    return alive


def seal() -> None:
    """Replace the course's implementation of the seven by stand-ins; refuse to read its modules again (see above)."""
    shardlab = sys.modules["shardlab"]
    originals = _originals()  # imports each module of IMPLEMENTATION
    modules = [sys.modules[name] for name in IMPLEMENTATION]
    for name in set().union(*SEALED.values()):
        getattr(shardlab, name)  # bind the top-level names (PEP 562) so the sweep replaces them too
    alive = _replace(originals)
    del originals
    gc.collect()
    if any(ref() is not None for ref in alive):
        kept = [getattr(ref(), "__module__", "?") + "." + getattr(ref(), "__qualname__", "?") for ref in alive if ref()]
        raise CourseCodeError(f"the course's functions are still reachable after sealing: {kept}")
    _no_fork_exec()
    files, basenames = _files(modules)
    import shardlab.checker.interrupt as interrupt  # its forked saves run the learner's save in a child

    guarded = (_hook.__code__, _which.__code__, _forking.__code__)
    defaults = (files, basenames, *_hook.__defaults__[2:-2], (interrupt._fork.__code__,), guarded)
    hook = type(_hook)(_hook.__code__, {}, "course_seal", defaults)
    sys.addaudithook(hook)


class Reach(NamedTuple):
    """A stand-in's report, read back from a check's diagnosis: the learner's function the worker was calling
    (its bare name, or None while the file loads or for a call that is not one of the seven by name), the
    course object it reached, and the message as the stand-in raised it."""

    function: str | None
    course: str
    message: str


def reach(diagnosis: object) -> Reach | None:
    """The reach a check's diagnosis reports (COURSE_CODE, then a stand-in's MESSAGE), else None."""
    said = str(diagnosis or "")
    found = PATTERN.match(said[len(COURSE_CODE) :]) if said.startswith(COURSE_CODE) else None
    if found is None:
        return None
    named = re.fullmatch(r"`(\w+)`", found["function"])
    return Reach(named.group(1) if named else None, found["course"], said[len(COURSE_CODE) :])


def reached(exc: BaseException) -> str | None:
    """The stand-in's message if `exc` is its error (type and message), else None (checking interpreter)."""
    if type(exc) is CourseCodeError and PATTERN.match(str(exc)):
        return str(exc)
    return None
