"""Bounds on every call into a learner's code, inside the checking interpreter.

A learner's file is untrusted and often wrong. Each of the seven functions (and the step that
`make_step` returns) is called through `Guard.call`, which

- stops a call that runs longer than `seconds` with a SIGALRM (a pure-Python loop, a sleep); code that
  catches the Overrun (`except BaseException`) gets it again every REPEAT_SECONDS, and a call that returns
  after its bound fired raises Overrun all the same, so the bound holds for loading the file too; in the
  worker, a call that has caught ENDED_AFTER stops ends its interpreter at the next (exit SWALLOWED_STATUS),
  so the bound holds within ENDED_AFTER repeats whatever the code catches,
- turns `sys.exit` inside learner code into a failed check instead of an ended run,
- writes one JSON line per outermost call to the progress file *before* the call starts, so the
  supervisor (`checker/watch.py`) knows which function was running when the interpreter was
  killed for memory, a console flood or a hang SIGALRM could not break, or died by itself,
- refuses at once to call a function that already broke a bound (its verdict is repeated), so
  one infinite loop costs one bound, not one per check,
- in the worker (`worker=True`, where only the learner's code holds what it returned), keeps every host
  NumPy array an outermost call returned, with a copy taken at its return, for the next
  KEPT_CALLS calls, and compares them after each: a result must keep its values after later calls (ids that
  are a view of a buffer the next call overwrites, a restored state a later restore changes), and the device arrays
  of the last PLACED_CALLS batches, read afresh (a device array may share a host buffer's memory). A change is
  raised from the call that made it, naming the earlier call and the array's place in its result. A state
  initial, next_batch, transition or restore returns with a field beside the six is raised from that call.
"""

import json
import os
import signal
import sys
import threading
import time

import shardlab.checker.causes as causes

CALL_SECONDS = 20.0  # wall-clock bound of one call into learner code
NOT_AGAIN = "not called again in this run"  # ends the verdict of each later call of a function stopped once
TIME_BOUND = "did not return within"  # follows the function's name in every verdict of a call stopped at its bound
REPEAT_SECONDS = 1.0  # past the bound, the alarm comes again this often until the call ends
ENDED_AFTER = 3  # in the worker, a call that caught this many stops (the bound's, then repeats) ends at the next
SWALLOWED_STATUS = 113  # the exit status of a worker ended so (ended_verdict names it)
MEMORY_BYTES = 2 * 1024**3  # growth of the checking interpreter allowed during one call
OUTPUT_BYTES = 5 * 1024**2  # console output a learner's code may write in a whole run
PAGE = os.sysconf("SC_PAGE_SIZE")
KEPT_CALLS = 6  # results of this many earlier outermost calls are compared after each call
KEPT_BYTES = 8 * 1024**2  # arrays larger than this (in one result) are not kept: the check stays cheap
# the rule a later change of each function's result breaks (learner/rules.py)
RESULT_RULES = {"restore": "exact-resume", "initial": "initial-fields"}


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
    if code == SWALLOWED_STATUS:
        return (
            f"{TIME_BOUND} its time bound and caught every stop the checker sent (an `except BaseException` "
            "or bare `except:` around a loop or a sleep), so the interpreter running it was ended -> an infinite "
            "loop? never catch BaseException; let the call end"
        )
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        native = " (a segfault in native code: ctypes, a C extension, a bad pointer)" if name == "SIGSEGV" else ""
        return f"ended {who}: killed by {name}{native}"
    return f"ended {who} with exit status {code} (os._exit?) -> return or raise instead"


def loop_verdict(function: str, seconds: float) -> str:
    return f"`{function}` {TIME_BOUND} {seconds:g} s -> an infinite loop? (the call was stopped)"


class ResultChanged(Overrun):
    """An array an earlier call returned changed when a later call ran (a rule broken, not a bound)."""


def _arrays(value, place: str, found: list, depth: int = 0) -> None:
    """Every host NumPy array in `value` (through dicts, lists, tuples and named tuples), with its place."""
    import numpy as np

    if depth > 4 or len(found) > 64:
        return
    if isinstance(value, np.ndarray):
        found.append((place, value))
    elif isinstance(value, dict):
        for key, item in list(value.items())[:64]:
            _arrays(item, f"{place}[{key!r}]", found, depth + 1)
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        for field in value._fields[:64]:
            _arrays(getattr(value, field, None), f"{place}.{field}", found, depth + 1)
    elif isinstance(value, (tuple, list)):
        for index, item in enumerate(value[:64]):
            _arrays(item, f"{place}[{index}]", found, depth + 1)


def _shown(array) -> str:
    import numpy as np

    flat = np.asarray(array).ravel()
    text = np.array2string(flat[:8], separator=", ", threshold=8)
    return text[:-1] + ", ...]" if flat.size > 8 else text


PROBES = "shardlab.checker.probes"  # the module whose functions a probe runs under a function's bounds
# the functions that return a state, and the rule a state of other fields than the six breaks there
STATE_RULES = {
    "initial": "initial-fields",
    "next_batch": "new-state",
    "transition": "one-update",
    "restore": "exact-resume",
}


PLACED_CALLS = 2  # a batch's device arrays are compared after this many later calls (a buffer refilled next)


class Placed:
    """A device array a call returned, read afresh from its buffers at every look (NumPy's view of the array itself
    is cached at its first read, and would not show a host buffer the array shares being filled again)."""

    def __init__(self, array):
        self.array = array
        self.first = self.now()
        self.shape = self.first.shape  # every shard's values, one after the other

    @staticmethod
    def fits(array) -> bool:
        import jax

        return isinstance(array, jax.Array) and not array.is_deleted() and array.size * 4 <= KEPT_BYTES

    def now(self):
        import numpy as np

        if self.array.is_deleted():  # donated since: no longer readable, nothing to compare
            return getattr(self, "first", np.zeros(0))
        return np.concatenate([np.asarray(shard.data).ravel() for shard in self.array.addressable_shards])

    def tobytes(self) -> bytes:
        return self.now().tobytes()

    def __array__(self, dtype=None, copy=None):
        return self.now().reshape(-1)


def _first_change(before, after) -> str:
    """' (first at flat position i: a -> b)' for two arrays of one shape that differ, else ''."""
    import numpy as np

    before, after = np.ascontiguousarray(before).ravel(), np.ascontiguousarray(after).ravel()
    if before.size == 0 or before.dtype != after.dtype:
        return ""
    raw = before.view(np.uint8).reshape(before.size, -1) != after.view(np.uint8).reshape(after.size, -1)
    changed = np.flatnonzero(raw.any(axis=1))
    if not changed.size:
        return ""
    return f" (first at flat position {changed[0]}: {before[changed[0]]} -> {after[changed[0]]})"


class Guard:
    """Time bound, progress lines and remembered verdicts for the calls of one checking interpreter."""

    def __init__(self, progress=None, seconds: float = CALL_SECONDS, poisoned: dict | None = None, worker=False):
        # in the worker, which only answers the checker: results are kept and compared, and a call that swallows
        # every stop ends the interpreter; never in an interpreter of the learner's own (a kernel, check_case)
        self.keep_results = self.end_swallowed = bool(worker)
        self.repeats = 0
        self.progress = open(progress, "a", encoding="utf-8") if progress else None
        self.seconds = float(seconds)
        self.poisoned = dict(poisoned or {})  # function -> the verdict it earned
        self.depth = 0
        self.running = None
        self.kept = []  # (call number, function, [(place, array, copy taken at return)]), newest last
        self.placed = []  # (call number, function, [(place, Placed)]): a batch's device arrays, newest last
        self.calls = 0
        self._writing = threading.Lock()  # two lanes of checks (checker/lanes.py) note events from two threads

    def note(self, **event) -> None:
        """Append one event to the progress file, flushed at once (the supervisor reads it live)."""
        if self.progress:
            line = json.dumps({**event, "pid": os.getpid()}) + "\n"
            with self._writing:
                self.progress.write(line)
                self.progress.flush()

    def _alarm(self, signum, frame):
        self.repeats += 1
        if self.end_swallowed and self.repeats > ENDED_AFTER:  # every Overrun so far was caught by the code it stopped
            sys.stderr.flush()
            os._exit(SWALLOWED_STATUS)
        verdict = loop_verdict(self.running, self.seconds)
        self.poisoned[self.running] = verdict
        raise Overrun(verdict)

    def call(self, function: str, target, *args, **kwargs):
        """`target(*args, **kwargs)` under the bounds; nested calls (the step inside a transition) ride along."""
        if function in self.poisoned:
            raise Overrun(f"{self.poisoned[function]}; {NOT_AGAIN}")
        if self.depth:
            return target(*args, **kwargs)
        self.depth, self.running, self.repeats = 1, function, 0
        self.note(event="call", function=function, rss=resident_bytes(), at=time.time())
        previous = signal.signal(signal.SIGALRM, self._alarm)
        signal.setitimer(signal.ITIMER_REAL, self.seconds, REPEAT_SECONDS)
        try:
            result = target(*args, **kwargs)
            if function in self.poisoned:  # the bound's Overrun was caught by the code it stopped: still broken
                raise Overrun(self.poisoned[function])
            if self.keep_results:
                if getattr(target, "__module__", None) != PROBES:  # a probe's result is the checker's, not a state
                    self._state_fields(function, result)
                self.calls += 1
                self._compare(function)
                self._keep(function, result)
                self._keep_placed(function, result)
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

    def _state_fields(self, function: str, result) -> None:
        """Raise ResultChanged (remembered: not called again) if the state `function` returned holds other fields
        than the six."""
        from shardlab.core.schema import FIELDS

        state = result if function in ("initial", "restore") else result[0] if isinstance(result, tuple) else None
        if function not in STATE_RULES or not isinstance(state, dict) or set(state) <= set(FIELDS):
            return
        extra = sorted(map(str, set(state) - set(FIELDS)))
        verdict = (
            f"`{function}` returned a state with {extra} beside the six fields: the state is the six fields "
            f"{list(FIELDS)}, no other (a field of your own is not saved, not restored, and not known to any other "
            "function that builds a state) -> keep what you derive from the six in a variable, never in the state "
            f"{{rule:{STATE_RULES[function]}}}" + causes.mark("state-field-added")
        )
        self.poisoned[function] = verdict
        raise ResultChanged(verdict)

    def _keep_placed(self, function: str, result) -> None:
        """Keep the placed arrays of the batch a next_batch returned for the next PLACED_CALLS calls, each read afresh
        at every look: a device array may share the memory of a host buffer the learner fills again later."""
        batch = result[1] if function == "next_batch" and isinstance(result, tuple) and len(result) > 1 else None
        found = [(f"its result[1].{name}", getattr(batch, name, None)) for name in ("features", "targets", "mask")]
        arrays = [(place, Placed(array)) for place, array in found if Placed.fits(array)]
        self.placed = [*self.placed, (self.calls, function, arrays)][-PLACED_CALLS:] if arrays else self.placed
        self.placed = [entry for entry in self.placed if self.calls - entry[0] < PLACED_CALLS]

    def _keep(self, function: str, result) -> None:
        """Keep the host arrays `result` holds, each with a copy taken now, for the next KEPT_CALLS calls."""
        found = []
        _arrays(result, "its result", found)
        kept, size = [], 0
        for place, array in found:
            size += array.nbytes
            if size > KEPT_BYTES or array.dtype.hasobject:
                break
            kept.append((place, array, array.copy()))
        self.kept = [*self.kept, (self.calls, function, kept)][-KEPT_CALLS:] if kept else self.kept[-KEPT_CALLS:]

    def _compare(self, function: str) -> None:
        """Raise ResultChanged if an array an earlier call returned no longer equals its copy from then."""
        placed = [(n, f, [(p, a, a.first) for p, a in arrays]) for n, f, arrays in self.placed]
        for number, earlier, kept in [*self.kept, *placed]:
            for place, array, copy in kept:
                try:
                    same = array.shape == copy.shape and array.tobytes() == copy.tobytes()
                except Exception:  # resized away under the caller
                    same = False
                if same:
                    continue
                self.kept, self.placed = [], []
                rule = RESULT_RULES.get(earlier, "host-results")
                ago = self.calls - number
                when = "the next call" if ago == 1 else f"{ago} calls later"
                now = _shown(array) if array.shape == copy.shape else f"shape {array.shape}"
                now += _first_change(copy, array) if array.shape == copy.shape else ""
                shared = (
                    " (a device array jax.device_put made from a host buffer may share that buffer's memory: fill a "
                    "new host array for every batch)"
                    if isinstance(array, Placed)
                    else ""
                )
                raise ResultChanged(
                    f"`{earlier}` returned an array ({place}, {_shown(copy)}) whose values changed to {now} when "
                    f"`{function}` ran ({when}): a result must keep its values after later calls -> return a new "
                    f"array from each call, never a view of a buffer (module-level, cached, reused) that a later "
                    f"call writes into{shared} {{rule:{rule}}}" + causes.mark("result-changed-later")
                )


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
