"""Every controller of a drill series keeps what it compiled in the series' compilation cache.

JAX 0.10.2 writes a persistent compilation cache entry from process 0 only, and the key a process
computes for a program hashes the compile options and the devices as that process sees them, so
process 1's keys are not process 0's: left alone, every later group's process 1 finds no entry it
can load and compiles each program again, while process 0 loads its own. `keep_compiled` wraps
JAX's writer (through shardlab.compat, version pinned) so a process other than 0 writes the
entries of the programs it compiled as well; a later group's process of the same id and world
computes the same keys and loads them. Process 0's writes stay JAX's own. Two processes never
write one entry (their keys differ), and a hit gives the executable XLA compiled for that program,
its options and devices, so a step computes the same values; only its time changes.

Only a controller started with a cache folder (`launcher.environment(cache=...)`) wraps anything:
the groups that measure their own compilation run without one.
"""

import os
import warnings

from shardlab import compat

CACHE_DIR = "JAX_COMPILATION_CACHE_DIR"  # the environment variable launcher.environment sets for a shared cache


def keep_compiled(environ=None) -> bool:
    """Let this process write its compiled programs to the cache `environ` names (default os.environ).

    Returns whether JAX's writer is wrapped (now or by an earlier call); False without a cache folder.
    """
    environ = os.environ if environ is None else environ
    if not environ.get(CACHE_DIR):
        return False
    compiler, compilation_cache, distributed = compat.jax_cache_writer()
    original = getattr(compiler, compat.CACHE_WRITE)
    if getattr(original, "shardlab_every_process", False):
        return True

    def write(cache_key, compile_time_secs, module_name, backend, executable, host_callbacks):
        if distributed.global_state.process_id in (None, 0) or host_callbacks:
            return original(cache_key, compile_time_secs, module_name, backend, executable, host_callbacks)
        if compile_time_secs < _min_compile_time():
            return None  # JAX's own rule: a program faster to compile than to load is not kept
        try:
            compilation_cache.put_executable_and_time(
                cache_key, module_name, executable, backend, int(compile_time_secs)
            )
        except Exception as exc:  # as JAX does: a cache that cannot be written costs a compile, never a step
            warnings.warn(
                f"no compilation cache entry written for {module_name!r}: {type(exc).__name__}: {exc}", stacklevel=2
            )
        return None

    write.shardlab_every_process = True
    write.shardlab_wraps = original
    setattr(compiler, compat.CACHE_WRITE, write)
    return True


def _min_compile_time() -> float:
    import jax

    return float(jax.config.jax_persistent_cache_min_compile_time_secs)
