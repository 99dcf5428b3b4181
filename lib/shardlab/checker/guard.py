"""Bounds on every call into a learner's code, inside the checking interpreter.

A learner's file is untrusted and often wrong. Each of the seven functions (and the step that
`make_step` returns) is called through `Guard.call`, which

- stops a call that runs longer than `seconds` with a SIGALRM (a pure-Python loop, a sleep); code that
  catches the Overrun (`except BaseException`) gets it again every REPEAT_SECONDS, and a call that returns
  after its bound fired raises Overrun all the same, so the bound holds for loading the file too,
- turns `sys.exit` inside learner code into a failed check instead of an ended run,
- writes one JSON line per outermost call to the progress file *before* the call starts, so the
  supervisor (`checker/watch.py`) knows which function was running when the interpreter was
  killed for memory, a console flood or a hang SIGALRM could not break, or died by itself,
- refuses at once to call a function that already broke a bound (its verdict is repeated), so
  one infinite loop costs one bound, not one per check.
"""

import json
import os
import signal
import time

CALL_SECONDS = 20.0  # wall-clock bound of one call into learner code
REPEAT_SECONDS = 1.0  # past the bound, the alarm comes again this often until the call ends
MEMORY_BYTES = 2 * 1024**3  # growth of the checking interpreter allowed during one call
OUTPUT_BYTES = 5 * 1024**2  # console output a learner's code may write in a whole run
PAGE = os.sysconf("SC_PAGE_SIZE")


class Overrun(BaseException):
    """A learner call broke a bound. A BaseException, so a learner's `except Exception` cannot swallow it."""


def resident_bytes(pid: int | str = "self") -> int:
    """Resident memory of process `pid` (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def gigabytes(count: int) -> str:
    return f"{count / 1024**3:.3g} GB" if count >= 1024**3 else f"{count / 1024**2:.3g} MB"


def memory_verdict(count: int) -> str:
    return f"used more than {gigabytes(count)} (the call was stopped) -> an unbounded array?"


def ended_verdict(code: int | None, who: str) -> str:
    """Why `who` (an interpreter) ended without answering, from its exit status (negative: the signal)."""
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        native = " (a segfault in native code: ctypes, a C extension, a bad pointer)" if name == "SIGSEGV" else ""
        return f"ended {who}: killed by {name}{native}"
    return f"ended {who} with exit status {code} (os._exit?) -> return or raise instead"


def loop_verdict(function: str, seconds: float) -> str:
    return f"`{function}` did not return within {seconds:g} s -> an infinite loop? (the call was stopped)"


class Guard:
    """Time bound, progress lines and remembered verdicts for the calls of one checking interpreter."""

    def __init__(self, progress=None, seconds: float = CALL_SECONDS, poisoned: dict | None = None):
        self.progress = open(progress, "a", encoding="utf-8") if progress else None
        self.seconds = float(seconds)
        self.poisoned = dict(poisoned or {})  # function -> the verdict it earned
        self.depth = 0
        self.running = None

    def note(self, **event) -> None:
        """Append one event to the progress file, flushed at once (the supervisor reads it live)."""
        if self.progress:
            self.progress.write(json.dumps({**event, "pid": os.getpid()}) + "\n")
            self.progress.flush()

    def _alarm(self, signum, frame):
        verdict = loop_verdict(self.running, self.seconds)
        self.poisoned[self.running] = verdict
        raise Overrun(verdict)

    def call(self, function: str, target, *args, **kwargs):
        """`target(*args, **kwargs)` under the bounds; nested calls (the step inside a transition) ride along."""
        if function in self.poisoned:
            raise Overrun(f"{self.poisoned[function]}; not called again in this run")
        if self.depth:
            return target(*args, **kwargs)
        self.depth, self.running = 1, function
        self.note(event="call", function=function, rss=resident_bytes(), at=time.time())
        previous = signal.signal(signal.SIGALRM, self._alarm)
        signal.setitimer(signal.ITIMER_REAL, self.seconds, REPEAT_SECONDS)
        try:
            result = target(*args, **kwargs)
            if function in self.poisoned:  # the bound's Overrun was caught by the code it stopped: still broken
                raise Overrun(self.poisoned[function])
            return result
        except SystemExit as exc:
            verdict = f"`{function}` called sys.exit({exc.code!r}) -> return or raise instead of ending the interpreter"
            self.poisoned[function] = verdict
            raise Overrun(verdict) from None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            self.depth, self.running = 0, None
            self.note(event="return", function=function)


class Bounded:
    """Forwards every attribute of `target`; callables come back wrapped, so calling them goes through `guard`."""

    def __init__(self, target, name: str, guard: Guard):
        self._target, self._name, self._guard = target, name, guard

    def __call__(self, *args, **kwargs):
        result = self._guard.call(self._name, self._target, *args, **kwargs)
        if self._name == "make_step" and callable(result):
            return Bounded(result, "the step from make_step", self._guard)
        return result

    def __getattr__(self, name):
        value = getattr(self._target, name)
        return Bounded(value, f"{self._name}.{name}", self._guard) if callable(value) else value


class BoundedImplementation:
    """A learner's module whose API functions run under `guard`; anything else is the module's own."""

    def __init__(self, module, api, guard: Guard):
        self._module, self._api, self.guard = module, tuple(api), guard

    def __getattr__(self, name):
        value = getattr(self._module, name)
        return Bounded(value, name, self.guard) if name in self._api else value
