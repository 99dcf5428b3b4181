"""The checker's persistent compilation cache: programs compiled by one check run are reused by the next.

JAX keys every entry on the program's text, the compile options, the JAX version and the device
set, so a cached program is the program a fresh compile would give: a hit changes how long a
check takes, never its verdict. The folder belongs to the checker (the user's cache folder, else
a temporary folder), never the learner's folder; `SHARDLAB_CHECK_CACHE=off` turns it off.
"""

import os
import tempfile

ENV = "SHARDLAB_CHECK_CACHE"  # a folder for the cache, or "off"


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
