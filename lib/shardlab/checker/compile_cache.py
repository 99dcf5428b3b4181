"""The checker's persistent compilation cache: programs compiled by one check run are reused by the next.

JAX keys every entry on the program's text, the compile options, the JAX version and the device
set, so a cached program is the program a fresh compile would give: a hit changes how long a
check takes, never its verdict. The folder belongs to the checker (the user's cache folder, else
a temporary folder), never the learner's folder; `SHARDLAB_CHECK_CACHE=off` turns it off.
"""

import contextlib
import os
import tempfile
import time

ENV = "SHARDLAB_CHECK_CACHE"  # a folder for the cache, or "off"
PAUSE_SECONDS = 0.05  # how long the warming waits before it looks for a free core again
WARMED = "shardlab-warmed.json"  # in the cache folder: the row counts the warming compiled there, per configuration
WARMED_BYTES = 1 << 20  # a record larger than this is not one the warming wrote: it is ignored


def folder() -> str | None:
    """The cache folder (created), or None when the cache is off or no folder can be made."""
    chosen = os.environ.get(ENV, "")
    if chosen.lower() == "off":
        return None
    if not chosen:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        chosen = os.path.join(base, "shardlab", "check-compilation-cache")
    for candidate in (chosen, os.path.join(tempfile.gettempdir(), f"shardlab-check-cache-{os.getuid()}")):
        try:
            os.makedirs(candidate, mode=0o700, exist_ok=True)
            if os.access(candidate, os.W_OK):
                return candidate
        except OSError:
            continue
    return None


def environment() -> str | None:
    """Point every interpreter this one starts at the cache (the environment only: no JAX is imported)."""
    where = folder()
    if where is None:
        return None
    settings = {
        "JAX_COMPILATION_CACHE_DIR": where,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }
    os.environ.update(settings)
    return where


def enable() -> str | None:
    """Point this interpreter (and, through the environment, every interpreter it starts) at the cache.

    Every compiled program is kept, however quick its compile was: a check compiles many small ones.
    """
    where = environment()
    if where is None:
        return None
    import jax

    jax.config.update("jax_compilation_cache_dir", where)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return where


class Warming:
    """The course's permutation (`split`, then `permutation(subkey, n)`) for each row count the checks will use,
    compiled into the cache by a low-priority thread while a core is free, so the learner's worker reads it back.

    It works from the last row count to the first while the worker starts at the first, so the two rarely compile
    the same program; counts an earlier run warmed (`Warmed`) or the checks already reached are skipped. Entries are
    keyed on the program's text: a hit gives the program a fresh compile would, and never changes a verdict.
    """

    def __init__(self, sizes, folder: str | None = None):
        import threading

        self.sizes, self.done, self._stop = list(dict.fromkeys(int(n) for n in sizes if int(n) > 0)), [], False
        self.warmed = Warmed(folder) if folder and self.sizes else None
        self.known = [n for n in self.sizes if self.warmed and n in self.warmed.sizes]  # in the cache already
        self.sizes = [n for n in self.sizes if n not in self.known]
        self._finish = False  # set by close(finish=True): compile what is left without waiting for a free core
        self.reached: set = set()  # sizes the checks have started on: the worker compiles those itself
        self.thread = threading.Thread(target=self._run, name="shardlab-cache-warming", daemon=True)
        if self.sizes:
            self.thread.start()

    def _run(self) -> None:
        lowest_priority()
        try:
            import jax

            key = jax.random.PRNGKey(0)
            for n in reversed(self.sizes):
                while not (self._stop or self._finish or n in self.reached or spare_core()):
                    time.sleep(PAUSE_SECONDS)
                if self._stop:
                    return
                if n in self.reached:  # too late to help: compiling it here too would only double the work
                    continue
                key, subkey = jax.random.split(key)
                jax.block_until_ready(jax.random.permutation(subkey, n))
                self.done.append(n)
        except Exception:  # a cache left cold only costs time: the worker compiles what it needs itself
            return

    def reach(self, n: int) -> None:
        """The checks start on a case of `n` rows now."""
        self.reached.add(int(n))

    def leave(self, sizes) -> None:
        """No check of the run will draw `sizes` after all (a kept pass answers it): not compiled here."""
        self.reached.update(int(n) for n in sizes)

    def close(self, finish: bool = False) -> list:
        """Stop after the program being compiled (never leave a thread inside XLA at exit), or once every size is
        done if `finish`; the sizes done."""
        self._stop, self._finish = not finish, finish
        if self.thread.is_alive():
            self.thread.join()
        if self.warmed is not None and self.done:
            self.warmed.add(self.done)
        return self.done


class Warmed:
    """The row counts an earlier warming compiled into the cache `folder` for this configuration (`WARMED`).

    It also records how many entries the folder held; a folder holding fewer lost some, and the record is set
    aside. A wrong record only costs time: the worker compiles what it does not find.
    """

    def __init__(self, folder: str):
        self.folder, self.path, self.key = folder, os.path.join(folder, WARMED), configuration()
        self.sizes = self._recorded(self._read())

    def _read(self) -> dict:
        import json

        from shardlab.core import files

        try:
            found = json.loads(files.read_bounded(self.path, WARMED_BYTES))
        except (OSError, ValueError, RecursionError):
            return {}
        return found if isinstance(found, dict) else {}

    def _recorded(self, found: dict) -> set:
        """The row counts `found` records for this configuration, if the folder still holds what it held then."""
        entry = found.get(self.key)
        if not isinstance(entry, dict) or not isinstance(entry.get("sizes"), list):
            return set()
        held = entry.get("entries")
        if not isinstance(held, int) or isinstance(held, bool) or held > entries(self.folder):
            return set()
        return {n for n in entry["sizes"] if isinstance(n, int) and not isinstance(n, bool) and n > 0}

    def add(self, sizes) -> None:
        """Record `sizes` as compiled into the folder, beside what is recorded already (by this run or another)."""
        import json

        from shardlab.core import files

        found = self._read()
        known = self._recorded(found) | self.sizes | {int(n) for n in sizes}
        found[self.key] = {"sizes": sorted(known), "entries": entries(self.folder)}
        with contextlib.suppress(OSError):  # not recorded: a later run warms these again
            files.replace(self.path, json.dumps(found, sort_keys=True))


def entries(folder: str) -> int:
    """How many programs the cache folder holds (JAX names each entry `NAME-KEY-cache`)."""
    try:
        return sum(1 for name in os.listdir(folder) if name.endswith("-cache"))
    except OSError:
        return 0


def configuration() -> str:
    """What a cached permutation program depends on besides its row count, as one string (JAX imported)."""
    import platform
    import sys

    import jax
    import jaxlib

    devices = jax.devices()
    flags = os.environ.get("XLA_FLAGS", "")
    return (
        f"jax {jax.__version__} jaxlib {jaxlib.__version__} python {sys.version.split()[0]} {platform.machine()} "
        f"{jax.default_backend()} {len(devices)} {devices[0].device_kind} XLA_FLAGS={flags}"
    )


def spare_core() -> bool:
    """Whether a core is free at this instant: the runnable threads (/proc/loadavg's fourth field, the caller
    included) are at most the cores this process may use. Asked before each program, so the warming never takes
    a core the worker wants."""
    try:
        with open("/proc/loadavg") as loadavg:
            runnable = int(loadavg.read().split()[3].split("/")[0])
        return runnable <= len(os.sched_getaffinity(0))
    except (OSError, ValueError, IndexError, AttributeError):
        return False


def lowest_priority() -> None:
    """Give the calling thread nice 19 (per thread on Linux): a process that starts between two looks at
    `spare_core` gets the core."""
    import threading

    with contextlib.suppress(AttributeError, OSError):  # not Linux, or not allowed: the caller's priority stays
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


def warm(sizes) -> Warming:
    """Start warming the cache for `sizes` (row counts), but those it compiled there before; nothing to do when the
    cache is off."""
    import jax

    folder = jax.config.jax_compilation_cache_dir
    return Warming(sizes if folder else (), folder)
