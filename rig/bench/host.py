"""The machine a bench ran on, and the wall times `make run` and `make test` recorded themselves."""

import json
import os
import platform
import sys
from pathlib import Path

import jax

RUN_WALL = "receipts/wall_time.json"  # written by `make run` (runner.run)
TEST_WALL = ".pytest_cache/v/shardlab/wall_time"  # written by `make test` (tests/conftest.py)


def boundary(cores: int) -> str:
    """What every number in bench.json was measured at, and what it does not show."""
    return (
        f"Four logical CPU devices in one process on a {cores}-core host: collectives are memory copies "
        "between threads, so device counts above the physical core count add scheduling, not compute. "
        "Times are warm (compiled, inputs placed) except the traced transitions and the end-to-end loops, "
        "which include sampling and placement. A speedup is over this module's own course loop on this "
        "machine. Nothing here measures a network, an accelerator or several hosts."
    )


def machine() -> dict:
    """The host the numbers come from."""
    import psutil

    return {
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cpus": psutil.cpu_count(logical=True),
        "processor": _cpu_model(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "jax": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
        "load_average_1_5_15": list(os.getloadavg()),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def recorded_wall_times(repo: Path) -> dict:
    """Wall times of `make run` and `make test` as their own last runs recorded them under `repo` (not re-measured)."""
    repo = Path(repo)
    found = {}
    for name, relative in (("make_run", RUN_WALL), ("make_test", TEST_WALL)):
        path = repo / relative
        try:
            found[name] = {**json.loads(path.read_text()), "source": relative}
        except (OSError, ValueError):
            found[name] = {"source": relative, "status": f"not recorded: run `{name.replace('_', ' ')}` first"}
    return found
