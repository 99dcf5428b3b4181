"""A controller of a drill series keeps what it compiled in the series' cache, whatever its process id.

JAX writes cache entries from process 0 only; `multi.cache.keep_compiled` lets the other processes
write theirs. Each case runs in a child interpreter whose JAX believes it is process 1 of a group
(the id JAX's writer reads), so what lands in the cache folder and what a later interpreter loads
are JAX's own observable behaviour: files in the folder, and JAX's cache-hit event.
"""

import json
import subprocess
import sys

import numpy as np
import pytest

from shardlab.multi import cache

pytestmark = pytest.mark.stage5

CHILD = """
import json, sys
import numpy as np
import jax, jax.numpy as jnp
from jax._src import distributed, monitoring
from shardlab.multi import cache

distributed.global_state.process_id = int(sys.argv[1])
wrapped = cache.keep_compiled() if sys.argv[2] == "keep" else False
hits = []
monitoring.register_event_listener(lambda name, **kw: hits.append(name) if name.endswith("cache_hits") else None)
x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
y = jax.jit(lambda a: jnp.tanh(a) @ a.T + 1.0)(x)
print(json.dumps({"wrapped": wrapped, "hits": len(hits), "y": np.asarray(y).tolist()}))
"""


def _child(folder, process_id: int, mode: str) -> dict:
    env = {
        "PATH": "/usr/bin:/bin",
        "JAX_PLATFORMS": "cpu",
        "JAX_COMPILATION_CACHE_DIR": str(folder),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }
    proc = subprocess.run([sys.executable, "-c", CHILD, str(process_id), mode], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _entries(folder) -> list:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith("-cache")) if folder.is_dir() else []


@pytest.mark.slow  # four fresh interpreters that import JAX: make test's, not the inner loop's
def test_process_1_keeps_its_programs_only_with_the_wrapper_and_a_later_process_1_loads_them(tmp_path):
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    expected = np.tanh(x) @ x.T + 1.0  # what the program computes, in NumPy

    jax_alone = tmp_path / "jax-alone"
    found = _child(jax_alone, 1, "plain")
    assert found["wrapped"] is False and _entries(jax_alone) == []  # JAX's rule: process 1 writes nothing

    kept = tmp_path / "kept"
    first = _child(kept, 1, "keep")
    assert first["wrapped"] is True and first["hits"] == 0
    written = _entries(kept)
    assert written  # the program process 1 compiled is in the folder now
    second = _child(kept, 1, "keep")
    assert second["hits"] >= 1 and _entries(kept) == written  # loaded, not compiled and written again
    for run in (found, first, second):
        np.testing.assert_allclose(np.asarray(run["y"]), expected, rtol=1e-5, atol=1e-5)

    zero = tmp_path / "process-0"
    assert _child(zero, 0, "keep")["hits"] == 0 and _entries(zero)  # process 0's writes are JAX's own, as before


def test_without_a_cache_folder_nothing_is_wrapped(monkeypatch):
    monkeypatch.delenv(cache.CACHE_DIR, raising=False)
    assert cache.keep_compiled() is False
    assert cache.keep_compiled({cache.CACHE_DIR: ""}) is False
