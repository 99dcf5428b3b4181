"""The course loop at its best: measured alone in a fresh interpreter, beside the in-process figure.

In the bench the course loop is timed in rotation with the fused loops, in a process that
also holds their compiled programs and data. `dedicated` runs the same measurement
(`endtoend.measure`, warm, same fixture, learning rate, steps and samples) in a new
interpreter that holds nothing else, so the two medians say whether the bench's own
process slows its baseline. The bench's speed-ups divide by the lower of the two.
"""

import json
import subprocess
import sys

import numpy as np

from shardlab.errors import ShardlabError


def dedicated(batch_sizes, steps: int, samples: int, seed: int, width: int, timeout: float = 600) -> dict:
    """{"b<B>": {"median_per_step_ms", "per_step_ms"}} of the course loop alone in a child interpreter."""
    args = json.dumps(
        {"batch_sizes": list(batch_sizes), "steps": steps, "samples": samples, "seed": seed, "width": width}
    )
    child = subprocess.run(
        [sys.executable, "-m", "shardlab.perf.baseline", args], capture_output=True, text=True, timeout=timeout
    )
    if child.returncode != 0:
        raise ShardlabError(f"the dedicated course-loop run failed: {child.stderr[-1500:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def _child(batch_sizes, steps, samples, seed, width) -> dict:
    from shardlab.core.devices import make_mesh, setup_devices

    setup_devices(4)
    from shardlab.perf import endtoend, sweep

    mesh, data, found = make_mesh(4), sweep.fixture(width), {}
    for batch_size in batch_sizes:
        loops = endtoend.programs(
            data, mesh, batch_size, steps, seed, ("course_loop",), learning_rate=sweep.learning_rate(width)
        )
        per_step = endtoend.measure(loops, steps, samples)["per_step_ms"]["course_loop"]
        found[f"b{batch_size}"] = {"median_per_step_ms": float(np.median(per_step)), "per_step_ms": per_step}
    return found


if __name__ == "__main__":
    print(json.dumps(_child(**json.loads(sys.argv[1]))))
