"""Load the implementation a notebook or the checker runs: the reference or a learner's file."""

import os
import traceback
import types

from shardlab.errors import ImplementationError

API = ("initial", "next_batch", "make_step", "transition", "contract", "save", "restore")
# the functions each stage's checks judge (stage 4 checks the compiled and eager forms of the step)
STAGE_FUNCTIONS = {1: ("initial", "next_batch"), 2: ("make_step", "transition"), 3: ("contract", "save", "restore")}
STAGE_FUNCTIONS[4] = ("make_step",)
STARTER = "start one with `python -m shardlab starter my_model.py`"
# A file to which a process appends the name of each API function it looks up on a loaded implementation
# (one line per name, once per process), when set: the course run records what each notebook reaches
# (shardlab.course.execute.run's `reached`). The checker records what its checks reach (Tracker), not
# its worker, whose own look-ups (every function's digest) reach nothing on a check's behalf. Code in
# the kernel could write that file too, so only the test suite sets it, on runs of the project's own files.
REACHED_ENV = "SHARDLAB_REACHED"


def check_path(spec) -> str:
    """The absolute path of a learner's .py file, or ImplementationError saying what was expected instead."""
    path = os.path.abspath(os.path.expanduser(os.fspath(spec)))
    if os.path.isdir(path):
        raise ImplementationError(
            f"implementation {spec!r} is a folder; expected 'reference' or the path of one .py file "
            f"(e.g. IMPL=my_model.py); {STARTER}"
        )
    if not os.path.exists(path):
        raise ImplementationError(
            f"implementation {spec!r} does not exist; expected 'reference' or the path of a .py file; {STARTER}"
        )
    if not path.endswith(".py"):
        raise ImplementationError(
            f"implementation {spec!r} is not a Python file; expected 'reference' or a .py file defining "
            f"{', '.join(API)}; {STARTER}"
        )
    return path


def where_in(exc: BaseException, path: str) -> str:
    """'file:line' and the source line in `path` where `exc` arose (SyntaxError: where the parser stopped)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        text = (exc.text or "").rstrip("\n")
        caret = " " * max((exc.offset or 1) - 1 - (len(text) - len(text.lstrip())), 0) + "^"
        return f"{exc.filename}:{exc.lineno}\n    {text.strip()}\n    {caret}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) == path]
    if not frames:
        frames = traceback.extract_tb(exc.__traceback__)[-1:]
    if not frames:
        return path
    frame = frames[-1]
    return f"{frame.filename}:{frame.lineno} in {frame.name}\n    {(frame.line or '').strip()}"


def load(spec: str = "reference") -> types.ModuleType:
    """Return the module named by `spec`: 'reference' or a path to a learner's .py file."""
    if spec in ("", "reference", None):
        from shardlab.learner import reference

        return _watched(reference)
    path = check_path(spec)
    module = types.ModuleType("learner_implementation")
    module.__file__ = path
    try:  # from the source itself: a __pycache__ beside it is never read, and none is written
        with open(path, "rb") as handle:
            code = compile(handle.read(), path, "exec", dont_inherit=True)
        exec(code, module.__dict__)
    except Exception as exc:
        raise ImplementationError(
            f"{spec} could not be imported: {type(exc).__name__}: {getattr(exc, 'msg', None) or exc}\n"
            f"  at {where_in(exc, path)}\nFix that line, then run the check again."
        ) from exc
    missing = [name for name in API if not callable(getattr(module, name, None))]
    if missing:
        raise ImplementationError(f"{spec} does not define {missing}; {STARTER} and copy your functions in")
    return _watched(module)


def note_reached(names) -> None:
    """Append each of `names` not yet noted by this process to the REACHED_ENV file, if one is set."""
    where = os.environ.get(REACHED_ENV)
    fresh = sorted(set(names) & set(API) - _NOTED)
    if not where or not fresh:
        return
    _NOTED.update(fresh)
    handle = os.open(where, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:  # one write per call: lines from several processes never interleave within a line
        os.write(handle, "".join(f"{name}\n" for name in fresh).encode())
    finally:
        os.close(handle)


_NOTED: set = set()


class _Watching(types.ModuleType):
    """A loaded implementation that notes each API function looked up on it (attribute access)."""

    def __getattribute__(self, name):
        if name in API:
            note_reached([name])
        return super().__getattribute__(name)


def _watched(module: types.ModuleType) -> types.ModuleType:
    """`module` itself; while REACHED_ENV is set, of a class that notes the API functions looked up on it."""
    if os.environ.get(REACHED_ENV):
        module.__class__ = _Watching
    return module
